package dev.dlock.client;

import static org.junit.jupiter.api.Assertions.assertEquals;
import static org.junit.jupiter.api.Assertions.assertThrows;

import java.time.Duration;
import org.junit.jupiter.api.Test;

/** The texts of {@link Locked}: its durations and its key templates. */
class TextTest {
    @Test
    void durations_read_short_forms_and_iso_8601() {
        assertEquals(Duration.ofMillis(250), DurationText.parse("ttl", "250ms"));
        assertEquals(Duration.ofSeconds(30), DurationText.parse("ttl", "30s"));
        assertEquals(Duration.ofSeconds(90), DurationText.parse("ttl", "1.5m"));
        assertEquals(Duration.ofHours(2), DurationText.parse("ttl", " 2h "));
        assertEquals(Duration.ofDays(1), DurationText.parse("ttl", "1d"));
        assertEquals(Duration.ofSeconds(45), DurationText.parse("ttl", "PT45S"));
    }

    @Test
    void durations_that_say_nothing_are_refused() {
        assertThrows(IllegalArgumentException.class, () -> DurationText.parse("ttl", "soon"));
        assertThrows(IllegalArgumentException.class, () -> DurationText.parse("ttl", "30"));
        assertThrows(IllegalArgumentException.class, () -> DurationText.parse("ttl", "-5s"));
        assertThrows(IllegalArgumentException.class, () -> DurationText.parse("ttl", "9999999999999d"));
    }

    @Test
    void key_templates_fill_in_the_arguments() {
        assertEquals("report:2026-11-27", KeyTemplate.parse("report:{0}", 1).format(new Object[] {"2026-11-27"}));
        assertEquals("b/a/b", KeyTemplate.parse("{1}/{0}/{1}", 2).format(new Object[] {"a", "b"}));
        assertEquals("user:null", KeyTemplate.parse("user:{0}", 1).format(new Object[] {null}));
        assertEquals("fixed", KeyTemplate.parse("fixed", 0).format(new Object[0]));
    }

    @Test
    void key_templates_keep_other_braces_and_never_group_numbers() {
        assertEquals("{x}:{}:12345", KeyTemplate.parse("{x}:{}:{0}", 1).format(new Object[] {12345}));
        assertEquals("{0", KeyTemplate.parse("{0", 1).format(new Object[] {"a"}));
    }

    @Test
    void key_templates_naming_a_missing_argument_are_refused() {
        assertThrows(IllegalArgumentException.class, () -> KeyTemplate.parse("report:{1}", 1));
        assertThrows(IllegalArgumentException.class, () -> KeyTemplate.parse("report:{0}", 0));
    }
}
