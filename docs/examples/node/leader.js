// A leader that gives up its lead cleanly: three candidates, one election.
//
// Each candidate waits in dlock_campaign to lead 'examples:scheduler'. The leader runs a few
// rounds of work, keeping its lead with dlock_renew, then resigns with dlock_release; a waiting
// candidate takes over at once. An observer LISTENs on the election's channel (dlock_watch) and
// sees every change of leader. Connects with the PG* environment variables or DATABASE_URL.
//
// Exits 1 unless every candidate led once, terms only grew, and the observer saw the changes.
import pg from "pg";

const ELECTION = "examples:scheduler";
const CANDIDATES = 3;
const terms = [];

async function connect() {
  const client = new pg.Client({ connectionString: process.env.DATABASE_URL });
  await client.connect();
  return client;
}

async function candidate(name) {
  const client = await connect();
  try {
    // Wait (up to 60 s) to lead; the lead lasts 5 s unless renewed.
    const { rows } = await client.query(
      "SELECT dlock.dlock_campaign($1, $2, $3, info => $4, wait => $5) AS term",
      [ELECTION, name, "5 seconds", `${name} at pid ${process.pid}`, "60 seconds"],
    );
    const term = rows[0].term; // a bigint: pg returns it as a string
    if (term === null) throw new Error(`${name}: never led`);
    terms.push({ term: BigInt(term), name });
    for (let round = 0; round < 3; round++) {
      const renewed = await client.query("SELECT dlock.dlock_renew($1, $2, $3) AS until", [ELECTION, name, "5 seconds"]);
      if (renewed.rows[0].until === null) throw new Error(`${name}: lost the lead`);
      const leader = await client.query("SELECT info FROM dlock.dlock_leader($1)", [ELECTION]);
      if (!leader.rows[0].info.startsWith(name)) throw new Error(`dlock_leader shows ${leader.rows[0].info} while ${name} leads`);
    }
    // Step down: the next candidate is granted in this release's own commit.
    await client.query("SELECT dlock.dlock_release($1, $2)", [ELECTION, name]);
  } finally {
    await client.end();
  }
}

const observer = await connect();
const { rows } = await observer.query("SELECT dlock.dlock_watch($1) AS channel", [ELECTION]);
const channel = rows[0].channel;
let seen = 0;
observer.on("notification", (n) => {
  if (n.channel === channel) seen += 1;
});
await Promise.all(Array.from({ length: CANDIDATES }, (_, i) => candidate(`node-${i}`)));
await new Promise((resolve) => setTimeout(resolve, 300)); // let the last notifications arrive
await observer.end();

const ordered = terms.map((t) => t.term);
const increasing = ordered.every((t, i) => i === 0 || t > ordered[i - 1]);
console.log(`node election: terms ${ordered.join(", ")} by ${terms.map((t) => t.name).join(", ")}, ${seen} notifications on ${channel}`);
if (terms.length !== CANDIDATES || !increasing || seen < CANDIDATES) process.exit(1);
