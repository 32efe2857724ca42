package dev.dlock.client;

import java.lang.annotation.Documented;
import java.lang.annotation.ElementType;
import java.lang.annotation.Retention;
import java.lang.annotation.RetentionPolicy;
import java.lang.annotation.Target;

/**
 * Runs the method under a lock, when it is called through {@link Dlock#proxy} (or a framework's
 * interceptor built on {@link LockedInterceptor}):
 *
 * <pre>{@code
 * interface Reports {
 *     @Locked(key = "report:{0}", ttl = "30s", waitAtMost = "10s")
 *     void write(String day) throws InterruptedException;
 * }
 * Reports reports = dlock.proxy(Reports.class, new ReportWriter());
 * }</pre>
 *
 * <p>A busy key makes the call throw {@link NotAcquiredException} without running the method.
 * If the lease is lost while the method runs, the method's thread is interrupted; when the method
 * has ended, the call throws {@link LeaseLostException} (with the method's own exception, if any,
 * as its cause), and the interrupt status the lock set is cleared. Inside the method,
 * {@link Dlock#currentLease()} gives the lease (its fence for guarded writes).
 */
@Documented
@Retention(RetentionPolicy.RUNTIME)
@Target(ElementType.METHOD)
public @interface Locked {
    /**
     * The key: a template whose {@code {0}}, {@code {1}}, ... are the call's arguments
     * ({@code String.valueOf} of each), e.g. {@code "report:{0}"}.
     *
     * @return the key template
     */
    String key();

    /**
     * The lease's ttl, renewed by the watchdog while the method runs: {@code "500ms"},
     * {@code "30s"}, {@code "5m"}, {@code "1h"}, {@code "1d"} or ISO-8601 ({@code "PT30S"}).
     *
     * @return the ttl
     */
    String ttl() default "30s";

    /**
     * How long to wait for the key: a duration as for {@link #ttl()}, {@code "0s"} (the default:
     * one try) or {@code "forever"}.
     *
     * @return the wait
     */
    String waitAtMost() default "0s";

    /**
     * Whether the lease is shared (a read lock) rather than exclusive.
     *
     * @return true for a shared lease
     */
    boolean shared() default false;
}
