// Runs the fixed-window limiter through ioredis's defineCommand against
// the server at argv[2]:argv[3] and prints what it got as one JSON object
// (TestScriptIoredis compares it with the expected counts and with
// redis-server's). ioredis 5 sends EVAL on a connection's first call of a
// script, EVALSHA after, and EVAL again (outside any pipeline) when
// EVALSHA gets NOSCRIPT.
"use strict";
const Redis = require("ioredis");

const limiter =
  "local c = redis.call('INCR', KEYS[1]) if c == 1 then redis.call('EXPIRE', KEYS[1], ARGV[1]) end return c";

async function main() {
  const [host, port] = [process.argv[2], Number(process.argv[3])];
  const opts = { host, port, maxRetriesPerRequest: 0, enableOfflineQueue: true, retryStrategy: () => null };
  const r = new Redis(opts);
  r.defineCommand("limit", { numberOfKeys: 1, lua: limiter });
  r.defineCommand("bad", { numberOfKeys: 1, lua: "return redis.call('INCRBY', KEYS[1], 'x')" });
  r.defineCommand("mixed", {
    numberOfKeys: 2,
    lua: "return {redis.call('GET', KEYS[1]), redis.call('GET', KEYS[2]), ARGV[1], {ok='FINE'}, 3.7}",
  });
  const out = {};
  out.counts = [];
  for (let i = 0; i < 5; i++) out.counts.push(await r.limit("rl:io", 60));
  out.ttl = await r.ttl("rl:io");
  // Another connection has not run the script yet: EVAL, then EVALSHA.
  const r2 = new Redis(opts);
  r2.defineCommand("limit", { numberOfKeys: 1, lua: limiter });
  out.second = [await r2.limit("rl:io", 60), await r2.limit("rl:io", 60)];
  // After SCRIPT FLUSH: EVALSHA answers NOSCRIPT, ioredis resends EVAL.
  await r.script("FLUSH");
  out.afterFlush = await r.limit("rl:io", 60);
  out.afterFlush2 = await r2.limit("rl:io", 60);
  // Pipelined and in MULTI/EXEC, after another flush.
  await r.script("FLUSH");
  const settle = (res) => res.map(([err, v]) => (err ? "error: " + err.message : v));
  out.pipeline = settle(await r.pipeline().limit("rl:p", 30).limit("rl:p", 30).get("rl:p").exec());
  out.ttlPipeline = await r.ttl("rl:p");
  out.multi = settle(await r.multi().limit("rl:m", 30).limit("rl:m", 30).exec());
  // MULTI after a flush: ioredis sends EVALSHA in it, and EXEC answers
  // NOSCRIPT for each (as Redis does).
  await r.script("FLUSH");
  out.multiFlushed = settle(await r.multi().limit("rl:m", 30).exec());
  // A script's error, and Redis's conversions seen through ioredis.
  try {
    await r.bad("rl:io");
    out.error = "none";
  } catch (e) {
    out.error = e.message;
  }
  out.mixed = await r.mixed("rl:io", "nokey", "arg");
  r.disconnect();
  r2.disconnect();
  console.log(JSON.stringify(out));
}

main().catch((e) => {
  console.error(e && e.stack ? e.stack : String(e));
  process.exit(1);
});
