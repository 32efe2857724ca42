package dev.dlock.client;

import static org.junit.jupiter.api.Assertions.assertEquals;
import static org.junit.jupiter.api.Assertions.assertFalse;
import static org.junit.jupiter.api.Assertions.assertThrows;
import static org.junit.jupiter.api.Assertions.assertTrue;

import java.io.IOException;
import java.util.Optional;
import java.util.concurrent.CompletableFuture;
import java.util.concurrent.CountDownLatch;
import java.util.concurrent.TimeUnit;
import java.util.concurrent.atomic.AtomicBoolean;
import java.util.concurrent.atomic.AtomicReference;
import org.junit.jupiter.api.Test;

/** {@link Locked} through {@link Dlock#proxy}: keys, busy keys, the lost signal's interrupt. */
class LockedProxyTest extends ServerTest {
    interface Reports {
        @Locked(key = "{0}:report:{1}", ttl = "3s")
        String write(String prefix, int day);

        @Locked(key = "{0}", ttl = "3s", waitAtMost = "10s")
        long waitThenRun(String key);

        @Locked(key = "{0}", ttl = "1500ms")
        void work(String key, CountDownLatch started, long millis) throws InterruptedException;

        @Locked(key = "{0}", ttl = "3s", shared = true)
        boolean read(String key);

        @Locked(key = "{0}")
        void fail(String key) throws IOException;

        String plain(String text);
    }

    /** What the reports do: each method looks at the lease it runs under. */
    static class ReportWriter implements Reports {
        final AtomicBoolean ran = new AtomicBoolean();
        final AtomicReference<Boolean> interrupted = new AtomicReference<>();

        @Override
        public String write(String prefix, int day) {
            ran.set(true);
            return Dlock.currentLease().orElseThrow().key();
        }

        @Override
        public long waitThenRun(String key) {
            return Dlock.currentLease().orElseThrow().fence();
        }

        @Override
        public void work(String key, CountDownLatch started, long millis) throws InterruptedException {
            started.countDown();
            try {
                Thread.sleep(millis);
            } catch (InterruptedException e) {
                interrupted.set(true);
                throw e;
            }
        }

        @Override
        public boolean read(String key) {
            return Dlock.currentLease().isPresent();
        }

        @Override
        public void fail(String key) throws IOException {
            throw new IOException("the disk is full");
        }

        @Override
        public String plain(String text) {
            return text + "!";
        }
    }

    @Test
    void a_locked_method_runs_under_its_formatted_key() {
        Dlock dlock = client();
        Reports reports = dlock.proxy(Reports.class, new ReportWriter());
        assertEquals(key() + ":report:12345", reports.write(key(), 12345));
        assertEquals(Optional.empty(), Dlock.currentLease(), "only inside the call");
        assertTrue(reports.read(key("shared")));
        assertEquals("x!", reports.plain("x"), "methods without @Locked are passed through");
    }

    @Test
    void a_busy_key_throws_not_acquired_without_running_the_method() {
        Dlock dlock = client();
        Dlock other = client();
        ReportWriter writer = new ReportWriter();
        Reports reports = dlock.proxy(Reports.class, writer);
        Lease held = other.lock(key() + ":report:1").acquire();
        assertThrows(NotAcquiredException.class, () -> reports.write(key(), 1));
        assertFalse(writer.ran.get());
        held.release();
        reports.write(key(), 1);
        assertTrue(writer.ran.get());
    }

    @Test
    void wait_at_most_waits_for_the_key() throws Exception {
        Dlock dlock = client();
        Dlock other = client();
        Reports reports = dlock.proxy(Reports.class, new ReportWriter());
        Lease held = other.lock(key()).acquire();
        CompletableFuture<Long> call = async(() -> reports.waitThenRun(key()));
        eventually("the call waits", () -> dlock.core().waits.hasLine(key()));
        held.release();
        assertTrue(call.get(10, TimeUnit.SECONDS) > held.fence());
    }

    @Test
    void a_lost_lease_interrupts_the_method_and_the_call_throws_lease_lost() throws Exception {
        Dlock dlock = client();
        ReportWriter writer = new ReportWriter();
        Reports reports = dlock.proxy(Reports.class, writer);
        CountDownLatch started = new CountDownLatch(1);
        AtomicReference<Throwable> thrown = new AtomicReference<>();
        AtomicReference<Boolean> flagAfter = new AtomicReference<>();
        Thread caller = new Thread(() -> {
            try {
                reports.work(key(), started, 60_000);
            } catch (Throwable t) {
                thrown.set(t);
            }
            flagAfter.set(Thread.currentThread().isInterrupted());
        });
        caller.start();
        assertTrue(started.await(10, TimeUnit.SECONDS));
        assertTrue(dlock.forceRelease(key()));
        caller.join(10_000);
        assertFalse(caller.isAlive(), "the method was interrupted long before its 60 s");
        assertEquals(Boolean.TRUE, writer.interrupted.get());
        assertTrue(thrown.get() instanceof LeaseLostException, String.valueOf(thrown.get()));
        assertTrue(thrown.get().getCause() instanceof InterruptedException);
        assertEquals(Boolean.FALSE, flagAfter.get(), "the lock's interrupt was cleared for the caller");
    }

    @Test
    void the_methods_own_exception_comes_through_unchanged() {
        Dlock dlock = client();
        Reports reports = dlock.proxy(Reports.class, new ReportWriter());
        IOException e = assertThrows(IOException.class, () -> reports.fail(key()));
        assertEquals("the disk is full", e.getMessage());
        dlock.lock(key()).acquire().release(); // and the lock was released
    }

    interface Jobs {
        int run(String key);
    }

    @Test
    void an_annotation_on_the_implementation_is_honoured() {
        Dlock dlock = client();
        Dlock other = client();
        Jobs jobs = dlock.proxy(Jobs.class, new Jobs() {
            @Override
            @Locked(key = "job:{0}")
            public int run(String key) {
                return Dlock.currentLease().isPresent() ? 1 : 0;
            }
        });
        assertEquals(1, jobs.run(key()));
        Lease held = other.lock("job:" + key()).acquire();
        assertThrows(NotAcquiredException.class, () -> jobs.run(key()));
        held.release();
    }

    interface BadTtl {
        @Locked(key = "{0}", ttl = "soon")
        void run(String key);
    }

    interface BadKey {
        @Locked(key = "{1}")
        void run(String key);
    }

    interface BadWait {
        @Locked(key = "k", waitAtMost = "-1s")
        void run();
    }

    @Test
    void bad_annotations_are_refused_when_the_proxy_is_made() {
        Dlock dlock = client();
        assertThrows(IllegalArgumentException.class, () -> dlock.proxy(BadTtl.class, key -> { }));
        assertThrows(IllegalArgumentException.class, () -> dlock.proxy(BadKey.class, key -> { }));
        assertThrows(IllegalArgumentException.class, () -> dlock.proxy(BadWait.class, () -> { }));
        assertThrows(IllegalArgumentException.class, () -> dlock.proxy(ReportWriter.class, new ReportWriter()));
    }

    @Test
    void the_proxy_is_equal_only_to_itself() {
        Dlock dlock = client();
        Reports one = dlock.proxy(Reports.class, new ReportWriter());
        Reports two = dlock.proxy(Reports.class, new ReportWriter());
        assertEquals(one, one);
        assertFalse(one.equals(two));
        assertTrue(one.toString().startsWith("dlock proxy of "));
    }

    @Test
    void the_interceptor_serves_a_framework_as_it_serves_the_proxy() throws Throwable {
        Dlock dlock = client();
        Dlock other = client();
        LockedInterceptor interceptor = dlock.lockedInterceptor();
        var method = Reports.class.getMethod("write", String.class, int.class);
        Object[] args = {key(), 7};
        assertTrue(interceptor.isLocked(method, null));
        assertEquals(key() + ":report:7",
                interceptor.invoke(method, args, () -> Dlock.currentLease().orElseThrow().key()));
        Lease held = other.lock(key() + ":report:7").acquire();
        assertThrows(NotAcquiredException.class, () -> interceptor.invoke(method, args, () -> "ran"));
        held.release();
        var plain = Reports.class.getMethod("plain", String.class);
        assertFalse(interceptor.isLocked(plain, ReportWriter.class));
        assertEquals("ran", interceptor.invoke(plain, new Object[] {"x"}, () -> "ran"));
    }

    /** What a Spring JDK proxy hands its interceptor: the interface's method, and the target's class. */
    static class AnnotatedJobs implements Jobs {
        @Override
        @Locked(key = "job:{0}")
        public int run(String key) {
            return 1;
        }
    }

    @Test
    void the_interceptor_finds_the_annotation_on_the_target_class() throws Throwable {
        Dlock dlock = client();
        Dlock other = client();
        LockedInterceptor interceptor = dlock.lockedInterceptor();
        var method = Jobs.class.getMethod("run", String.class);
        assertFalse(interceptor.isLocked(method, null));
        assertTrue(interceptor.isLocked(method, AnnotatedJobs.class));
        Lease held = other.lock("job:" + key()).acquire();
        assertThrows(NotAcquiredException.class,
                () -> interceptor.invoke(method, AnnotatedJobs.class, new Object[] {key()}, () -> 1));
        held.release();
        assertEquals(1, interceptor.invoke(method, AnnotatedJobs.class, new Object[] {key()},
                () -> Dlock.currentLease().isPresent() ? 1 : 0));
    }
}
