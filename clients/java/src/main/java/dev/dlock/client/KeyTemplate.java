package dev.dlock.client;

import java.util.ArrayList;
import java.util.List;

/**
 * The key of one call of a {@link Locked} method: its template with {@code {0}}, {@code {1}}, ...
 * replaced by {@code String.valueOf} of the call's arguments. A brace that does not open such a
 * placeholder is kept as it is. Unlike {@link java.text.MessageFormat}, numbers are not grouped
 * by locale ({@code 12345}, never {@code 12,345}): a key must not depend on where it runs.
 */
final class KeyTemplate {
    private final List<String> literals = new ArrayList<>();
    private final List<Integer> arguments = new ArrayList<>();
    private final String text;

    private KeyTemplate(String text) {
        this.text = text;
    }

    /**
     * Parses {@code template} for a method of {@code parameters} parameters.
     *
     * @throws IllegalArgumentException if a placeholder names an argument the method has not
     */
    static KeyTemplate parse(String template, int parameters) {
        KeyTemplate parsed = new KeyTemplate(template);
        StringBuilder literal = new StringBuilder();
        int i = 0;
        while (i < template.length()) {
            char c = template.charAt(i);
            int close = c == '{' ? template.indexOf('}', i) : -1;
            if (close > i + 1 && template.substring(i + 1, close).chars().allMatch(Character::isDigit)) {
                int index = Integer.parseInt(template.substring(i + 1, close));
                if (index >= parameters) {
                    throw new IllegalArgumentException("dlock: the key \"" + template + "\" names argument {" + index
                            + "}, but the method has " + parameters + " parameter(s)");
                }
                parsed.literals.add(literal.toString());
                parsed.arguments.add(index);
                literal.setLength(0);
                i = close + 1;
            } else {
                literal.append(c);
                i++;
            }
        }
        parsed.literals.add(literal.toString());
        return parsed;
    }

    /** The key of a call with these arguments. */
    String format(Object[] args) {
        StringBuilder key = new StringBuilder(literals.get(0));
        for (int i = 0; i < arguments.size(); i++) {
            key.append(args[arguments.get(i)]).append(literals.get(i + 1));
        }
        return key.toString();
    }

    @Override
    public String toString() {
        return text;
    }
}
