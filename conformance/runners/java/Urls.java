package dev.dlock.conformance;

import java.net.URI;
import java.net.URLEncoder;
import java.net.URLDecoder;
import java.nio.charset.StandardCharsets;
import java.util.LinkedHashMap;
import java.util.Map;

/**
 * The suite's libpq URLs ({@code postgresql://user@host:port/db?...}) as pgjdbc URLs, with what a
 * step changes in them: the role, the {@code application_name}, or an address where nothing
 * listens (an offline client).
 */
record Urls(String host, int port, String database, String user, String password, Map<String, String> params) {
    static Urls parse(String libpq) {
        URI uri = URI.create(libpq);
        if (!"postgresql".equals(uri.getScheme()) && !"postgres".equals(uri.getScheme())) {
            throw new IllegalArgumentException("not a postgresql:// URL: " + libpq);
        }
        String user = null;
        String password = null;
        if (uri.getUserInfo() != null) {
            String[] parts = uri.getUserInfo().split(":", 2);
            user = parts[0];
            password = parts.length > 1 ? parts[1] : null;
        }
        Map<String, String> params = new LinkedHashMap<>();
        if (uri.getRawQuery() != null) {
            for (String pair : uri.getRawQuery().split("&")) {
                String[] kv = pair.split("=", 2);
                params.put(decode(kv[0]), kv.length > 1 ? decode(kv[1]) : "");
            }
        }
        String path = uri.getPath() == null || uri.getPath().length() <= 1 ? "postgres" : uri.getPath().substring(1);
        return new Urls(uri.getHost() == null ? "127.0.0.1" : uri.getHost(), uri.getPort() < 0 ? 5432 : uri.getPort(),
                path, user, password, params);
    }

    private static String decode(String text) {
        return URLDecoder.decode(text, StandardCharsets.UTF_8);
    }

    private static String encode(String text) {
        return URLEncoder.encode(text, StandardCharsets.UTF_8);
    }

    Urls withUser(String role) {
        return new Urls(host, port, database, role, null, params);
    }

    Urls withParam(String name, String value) {
        Map<String, String> changed = new LinkedHashMap<>(params);
        changed.put(name, value);
        return new Urls(host, port, database, user, password, changed);
    }

    /** An address where nothing listens, and a short connect timeout. */
    Urls offline() {
        return new Urls("127.0.0.1", 1, database, user, password, params).withParam("connect_timeout", "2");
    }

    /** The pgjdbc URL, libpq's parameter names turned into pgjdbc's. */
    String jdbc() {
        StringBuilder url = new StringBuilder("jdbc:postgresql://").append(host).append(':').append(port).append('/')
                .append(encode(database));
        char sep = '?';
        if (user != null) {
            url.append(sep).append("user=").append(encode(user));
            sep = '&';
        }
        if (password != null) {
            url.append(sep).append("password=").append(encode(password));
            sep = '&';
        }
        for (Map.Entry<String, String> p : params.entrySet()) {
            String name = switch (p.getKey()) {
                case "application_name" -> "ApplicationName";
                case "connect_timeout" -> "connectTimeout";
                default -> p.getKey();
            };
            url.append(sep).append(encode(name)).append('=').append(encode(p.getValue()));
            sep = '&';
        }
        return url.toString();
    }
}
