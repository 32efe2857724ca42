package dev.dlock.client;

import java.net.InetAddress;
import java.nio.charset.StandardCharsets;
import java.util.UUID;

/** The owner identity a client takes its leases as, when none is given. */
final class Owners {
    /** How much of the host name goes into a generated owner, so that it always fits in 256 bytes. */
    static final int MAX_HOST_BYTES = 64;

    private Owners() {}

    /**
     * {@code host:pid:random}: readable in {@code dlock_locks} (which host and process holds a key),
     * and unguessable thanks to 122 random bits, so that no one else renews or releases by accident.
     */
    static String generate() {
        String host = hostName();
        byte[] bytes = host.getBytes(StandardCharsets.UTF_8);
        if (bytes.length > MAX_HOST_BYTES) {
            host = new String(bytes, 0, MAX_HOST_BYTES, StandardCharsets.UTF_8).replace("\uFFFD", "");
        }
        return host + ":" + ProcessHandle.current().pid() + ":" + UUID.randomUUID().toString().replace("-", "");
    }

    private static String hostName() {
        String fromEnv = System.getenv("HOSTNAME");
        if (fromEnv != null && !fromEnv.isBlank()) {
            return fromEnv.strip();
        }
        try {
            return InetAddress.getLocalHost().getHostName();
        } catch (java.io.IOException | SecurityException e) {
            return "unknown";
        }
    }
}
