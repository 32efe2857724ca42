package dev.dlock.conformance;

import com.google.gson.JsonArray;
import com.google.gson.JsonElement;
import com.google.gson.JsonObject;
import com.google.gson.JsonParser;
import com.google.gson.JsonPrimitive;
import java.io.IOException;
import java.nio.charset.StandardCharsets;
import java.nio.file.Files;
import java.nio.file.Path;
import java.util.ArrayList;
import java.util.LinkedHashMap;
import java.util.List;
import java.util.Map;

/**
 * Scenario files as plain Java values: {@code Map<String, Object>} (in file order),
 * {@code List<Object>}, {@code String}, {@code Long} (integers), {@code Double}, {@code Boolean}
 * and {@code null}. Parsed by Gson (Debian's libgoogle-gson-java: one jar, no dependencies).
 */
final class Json {
    private Json() {}

    static Map<String, Object> readObject(Path path) throws IOException {
        JsonElement root = JsonParser.parseString(Files.readString(path, StandardCharsets.UTF_8));
        if (!root.isJsonObject()) {
            throw new IOException(path + ": not a JSON object");
        }
        @SuppressWarnings("unchecked")
        Map<String, Object> object = (Map<String, Object>) plain(root);
        return object;
    }

    static Object plain(JsonElement element) {
        if (element == null || element.isJsonNull()) {
            return null;
        }
        if (element.isJsonObject()) {
            Map<String, Object> map = new LinkedHashMap<>();
            for (Map.Entry<String, JsonElement> e : ((JsonObject) element).entrySet()) {
                map.put(e.getKey(), plain(e.getValue()));
            }
            return map;
        }
        if (element.isJsonArray()) {
            List<Object> list = new ArrayList<>();
            for (JsonElement e : (JsonArray) element) {
                list.add(plain(e));
            }
            return list;
        }
        JsonPrimitive primitive = (JsonPrimitive) element;
        if (primitive.isBoolean()) {
            return primitive.getAsBoolean();
        }
        if (primitive.isNumber()) {
            String text = primitive.getAsString();
            boolean integral = text.chars().noneMatch(c -> c == '.' || c == 'e' || c == 'E');
            return integral ? (Object) Long.parseLong(text) : (Object) Double.parseDouble(text);
        }
        return primitive.getAsString();
    }
}
