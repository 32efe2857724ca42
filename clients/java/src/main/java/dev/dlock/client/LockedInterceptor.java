package dev.dlock.client;

import java.lang.reflect.Method;
import java.util.ArrayDeque;
import java.util.Arrays;
import java.util.Deque;
import java.util.List;
import java.util.Optional;
import java.util.concurrent.ConcurrentHashMap;
import java.util.concurrent.ConcurrentMap;

/**
 * What {@link Locked} does around a call, for any interception mechanism: {@link Dlock#proxy}
 * uses it, and so can a framework's method interceptor (Spring's {@code MethodInterceptor}, a CDI
 * interceptor, ...), with no dependency of this library on the framework.
 *
 * <p>Around a call of a method annotated {@code @Locked}: the lock is taken
 * ({@link NotAcquiredException} if the key stays busy, and the method does not run); the method
 * runs with the lease as {@link Dlock#currentLease()}; if the lease is lost meanwhile, the thread
 * running the method is interrupted (once, and only while the method runs); then the lease is
 * released, and if it was lost the call throws {@link LeaseLostException} instead of returning,
 * with the method's exception (if any) as its cause, after clearing the interrupt status the lock
 * set.
 */
public final class LockedInterceptor {
    private static final ThreadLocal<Deque<Lease>> CURRENT = ThreadLocal.withInitial(ArrayDeque::new);

    /** The call being intercepted. */
    @FunctionalInterface
    public interface Invocation {
        /**
         * Runs the method.
         *
         * @return what it returned
         * @throws Throwable what it threw
         */
        Object proceed() throws Throwable;
    }

    private final Dlock dlock;
    /** The annotation that rules each (method called, target class), read once. */
    private final ConcurrentMap<List<Object>, Optional<LockedMethod>> methods = new ConcurrentHashMap<>();

    LockedInterceptor(Dlock dlock) {
        this.dlock = dlock;
    }

    /**
     * Runs {@code invocation} as {@link Locked} on {@code method} says (or just runs it, if the
     * method has no such annotation).
     *
     * @param method the method called, which carries the annotation
     * @param args the call's arguments (the key template's {@code {0}}, {@code {1}}, ...)
     * @param invocation runs the method
     * @return what the method returned
     * @throws Throwable what the method threw, {@link NotAcquiredException}, or {@link LeaseLostException}
     */
    public Object invoke(Method method, Object[] args, Invocation invocation) throws Throwable {
        return invoke(method, null, args, invocation);
    }

    /**
     * Runs {@code invocation} as {@link Locked} says on {@code method}, or else on the method of
     * {@code targetClass} that implements it (an interface method called through a proxy whose
     * target's class carries the annotation).
     *
     * @param method the method called (an interface's, or the class's)
     * @param targetClass the class of the object called, or {@code null}
     * @param args the call's arguments
     * @param invocation runs the method
     * @return what the method returned
     * @throws Throwable what the method threw, {@link NotAcquiredException}, or {@link LeaseLostException}
     */
    public Object invoke(Method method, Class<?> targetClass, Object[] args, Invocation invocation) throws Throwable {
        Optional<LockedMethod> locked = ruling(method, targetClass);
        if (locked.isEmpty()) {
            return invocation.proceed();
        }
        return call(locked.get(), args, invocation);
    }

    /**
     * Reads and checks the annotation that rules {@code method} now (the proxy does so for every
     * method of its interface, so that a bad annotation fails when the proxy is made).
     *
     * @param method a method
     * @param targetClass the class that implements it, or {@code null}
     * @return whether calls of it run under a lock
     * @throws IllegalArgumentException if the annotation says no valid key template or duration
     */
    public boolean isLocked(Method method, Class<?> targetClass) {
        return ruling(method, targetClass).isPresent();
    }

    private Optional<LockedMethod> ruling(Method method, Class<?> targetClass) {
        List<Object> key = Arrays.asList(method, targetClass);
        Optional<LockedMethod> known = methods.get(key);
        if (known != null) {
            return known;
        }
        Optional<LockedMethod> read = read(method);
        if (read.isEmpty() && targetClass != null) {
            try {
                read = read(targetClass.getMethod(method.getName(), method.getParameterTypes()));
            } catch (NoSuchMethodException e) {
                // Not implemented there (a default method): the method's own annotation rules.
            }
        }
        methods.putIfAbsent(key, read);
        return read;
    }

    private static Optional<LockedMethod> read(Method method) {
        Locked locked = method.getAnnotation(Locked.class);
        return locked == null ? Optional.empty() : Optional.of(LockedMethod.of(method, locked));
    }

    private Object call(LockedMethod locked, Object[] args, Invocation invocation) throws Throwable {
        Lease lease = locked.lock(dlock, args).acquire();
        InterruptOnLost interrupt = new InterruptOnLost(Thread.currentThread());
        lease.lostSignal().thenRun(interrupt::fire);
        Deque<Lease> current = CURRENT.get();
        current.push(lease);
        Object result = null;
        Throwable failure = null;
        try {
            result = invocation.proceed();
        } catch (Throwable t) {
            failure = t;
        } finally {
            current.pop();
            if (current.isEmpty()) {
                CURRENT.remove();
            }
        }
        if (interrupt.finish()) {
            // The interrupt was the lock's, meant for the method alone: the caller gets the
            // LeaseLostException instead.
            Thread.interrupted();
        }
        boolean lost = false;
        try {
            lease.close();
        } catch (LeaseLostException e) {
            lost = true;
        }
        if (lost) {
            throw new LeaseLostException("the lease on '" + lease.key() + "' was lost while "
                    + locked.method().getName() + " ran", failure);
        }
        if (failure != null) {
            throw failure;
        }
        return result;
    }

    /** The lease of the innermost {@code @Locked} call running on this thread. */
    static Optional<Lease> current() {
        Deque<Lease> current = CURRENT.get();
        Optional<Lease> lease = Optional.ofNullable(current.peek());
        if (current.isEmpty()) {
            CURRENT.remove();
        }
        return lease;
    }

    /** Interrupts the method's thread when the lease is lost, only while the method runs, once. */
    private static final class InterruptOnLost {
        private final Thread thread;
        private boolean running = true;
        private boolean fired;

        InterruptOnLost(Thread thread) {
            this.thread = thread;
        }

        synchronized void fire() {
            if (running && !fired) {
                fired = true;
                thread.interrupt();
            }
        }

        /** The method has ended: no interrupt from now on; whether one was sent. */
        synchronized boolean finish() {
            running = false;
            return fired;
        }
    }
}
