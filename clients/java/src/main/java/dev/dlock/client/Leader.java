package dev.dlock.client;

import java.time.Instant;

/**
 * The current leader of an election, as {@code dlock_leader} shows it (never the candidate string).
 *
 * @param info what the leader published about itself when it campaigned, or {@code null}
 * @param term the leader's term: the fence of its lease, greater than every earlier leader's
 * @param since when it became leader (server clock)
 * @param expiresAt when its lead ends unless renewed (server clock), or {@code null} if bound to its session
 */
public record Leader(String info, long term, Instant since, Instant expiresAt) {}
