package dev.dlock.client;

import java.lang.reflect.Method;
import java.time.Duration;

/**
 * A method's {@link Locked} annotation, read and checked once (a bad duration or key template is
 * an {@link IllegalArgumentException} when the proxy or interceptor first sees the method, not at
 * its first call).
 */
record LockedMethod(Method method, KeyTemplate key, Duration ttl, Duration waitAtMost, boolean shared) {
    static LockedMethod of(Method method, Locked locked) {
        String where = method.getDeclaringClass().getSimpleName() + "." + method.getName();
        KeyTemplate key = KeyTemplate.parse(locked.key(), method.getParameterCount());
        Duration ttl = Args.positive("ttl of " + where, DurationText.parse("ttl of " + where, locked.ttl()));
        Duration wait = DurationText.FOREVER.equals(locked.waitAtMost().strip()) ? null
                : Args.notNegative("waitAtMost of " + where, DurationText.parse("waitAtMost of " + where, locked.waitAtMost()));
        return new LockedMethod(method, key, ttl, wait, locked.shared());
    }

    /** The lock of one call. */
    LockBuilder lock(Dlock dlock, Object[] args) {
        LockBuilder lock = dlock.lock(key.format(args == null ? new Object[0] : args)).ttl(ttl);
        lock = waitAtMost == null ? lock.waitForever() : lock.waitAtMost(waitAtMost);
        return shared ? lock.shared() : lock;
    }
}
