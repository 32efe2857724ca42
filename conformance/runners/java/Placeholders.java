package dev.dlock.conformance;

import java.util.ArrayList;
import java.util.List;

/**
 * A scenario's query, written with PostgreSQL's {@code $1} parameters, as JDBC takes it ({@code ?}),
 * leaving alone what is quoted: {@code '...'} literals, {@code "..."} identifiers and
 * {@code $tag$...$tag$} bodies (the {@code DO $$ ... $$} blocks of the scenarios).
 *
 * @param text the query with {@code ?}
 * @param order for each {@code ?}, the 1-based number of the parameter it stands for
 */
record Placeholders(String text, int[] order) {
    static Placeholders of(String sql) {
        StringBuilder out = new StringBuilder(sql.length());
        List<Integer> order = new ArrayList<>();
        int i = 0;
        while (i < sql.length()) {
            char c = sql.charAt(i);
            if (c == '\'' || c == '"') {
                int end = sql.indexOf(c, i + 1);
                while (end > 0 && end + 1 < sql.length() && sql.charAt(end + 1) == c) {
                    end = sql.indexOf(c, end + 2);
                }
                end = end < 0 ? sql.length() : end + 1;
                out.append(sql, i, end);
                i = end;
            } else if (c == '$' && i + 1 < sql.length() && Character.isDigit(sql.charAt(i + 1))) {
                int end = i + 1;
                while (end < sql.length() && Character.isDigit(sql.charAt(end))) {
                    end++;
                }
                order.add(Integer.parseInt(sql.substring(i + 1, end)));
                out.append('?');
                i = end;
            } else if (c == '$') {
                int tagEnd = i + 1;
                while (tagEnd < sql.length() && (Character.isLetterOrDigit(sql.charAt(tagEnd)) || sql.charAt(tagEnd) == '_')) {
                    tagEnd++;
                }
                if (tagEnd < sql.length() && sql.charAt(tagEnd) == '$') {
                    String tag = sql.substring(i, tagEnd + 1);
                    int close = sql.indexOf(tag, tagEnd + 1);
                    int end = close < 0 ? sql.length() : close + tag.length();
                    out.append(sql, i, end);
                    i = end;
                } else {
                    out.append(c);
                    i++;
                }
            } else {
                out.append(c);
                i++;
            }
        }
        return new Placeholders(out.toString(), order.stream().mapToInt(Integer::intValue).toArray());
    }
}
