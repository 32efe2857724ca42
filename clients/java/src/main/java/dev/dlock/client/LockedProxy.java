package dev.dlock.client;

import java.lang.reflect.InvocationHandler;
import java.lang.reflect.InvocationTargetException;
import java.lang.reflect.Method;
import java.lang.reflect.Proxy;
import java.util.Objects;

/** {@link Dlock#proxy}: a {@link java.lang.reflect.Proxy} that runs its calls through the interceptor. */
final class LockedProxy {
    private LockedProxy() {}

    static <T> T of(LockedInterceptor interceptor, Class<T> type, T target) {
        Objects.requireNonNull(type, "type");
        Objects.requireNonNull(target, "target");
        if (!type.isInterface()) {
            throw new IllegalArgumentException("dlock: " + type.getName() + " is not an interface");
        }
        Class<?> targetClass = target.getClass();
        // Every annotation is read now: a bad one fails here, not at its first call.
        for (Method method : type.getMethods()) {
            interceptor.isLocked(method, targetClass);
        }
        InvocationHandler handler = (proxy, method, args) -> {
            if (method.getDeclaringClass() == Object.class) {
                return switch (method.getName()) {
                    case "equals" -> proxy == args[0];
                    case "hashCode" -> System.identityHashCode(proxy);
                    case "toString" -> "dlock proxy of " + target;
                    default -> call(method, target, args);
                };
            }
            return interceptor.invoke(method, targetClass, args, () -> call(method, target, args));
        };
        return type.cast(Proxy.newProxyInstance(type.getClassLoader(), new Class<?>[] {type}, handler));
    }

    /** The target's method, its own exception rethrown as it is. */
    private static Object call(Method method, Object target, Object[] args) throws Throwable {
        try {
            if (!method.canAccess(target)) {
                // A package-private interface, or a target of a non-public class.
                method.setAccessible(true);
            }
            return method.invoke(target, args);
        } catch (InvocationTargetException e) {
            throw e.getCause();
        }
    }
}
