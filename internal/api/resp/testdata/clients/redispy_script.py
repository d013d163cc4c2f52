"""Runs the fixed-window limiter through redis-py's register_script against
the server at argv[1]:argv[2] and prints what it got as one JSON object
(TestScriptRedisPy compares it with the expected counts and with
redis-server's). redis-py sends EVALSHA, and on NOSCRIPT SCRIPT LOAD and
EVALSHA again; a pipeline first sends SCRIPT EXISTS and SCRIPT LOADs the
missing scripts."""
import json
import sys

import redis

LIMITER = ("local c = redis.call('INCR', KEYS[1]) if c == 1 then "
           "redis.call('EXPIRE', KEYS[1], ARGV[1]) end return c")


def main():
    host, port = sys.argv[1], int(sys.argv[2])
    r = redis.Redis(host=host, port=port, decode_responses=True, socket_timeout=10)
    lim = r.register_script(LIMITER)
    bad = r.register_script("return redis.call('INCRBY', KEYS[1], 'x')")
    mixed = r.register_script(
        "return {redis.call('GET', KEYS[1]), redis.call('GET', KEYS[2]), ARGV[1], {ok='FINE'}, 3.7}")
    out = {"version": redis.__version__}
    out["counts"] = [lim(keys=["rl:py"], args=[60]) for _ in range(5)]
    out["ttl"] = r.ttl("rl:py")
    # After SCRIPT FLUSH: EVALSHA answers NOSCRIPT, redis-py loads it again.
    r.script_flush()
    out["afterFlush"] = lim(keys=["rl:py"], args=[60])
    # Pipelined and in MULTI/EXEC, after another flush.
    r.script_flush()
    p = r.pipeline(transaction=False)
    lim(keys=["rl:p"], args=[30], client=p)
    lim(keys=["rl:p"], args=[30], client=p)
    p.get("rl:p")
    out["pipeline"] = p.execute()
    out["ttlPipeline"] = r.ttl("rl:p")
    r.script_flush()
    p = r.pipeline(transaction=True)
    lim(keys=["rl:m"], args=[30], client=p)
    lim(keys=["rl:m"], args=[30], client=p)
    out["multi"] = p.execute()
    # A script's error, and Redis's conversions seen through redis-py.
    try:
        bad(keys=["rl:py"])
        out["error"] = "none"
    except redis.ResponseError as e:
        out["error"] = str(e)
    out["mixed"] = mixed(keys=["rl:py", "nokey"], args=["arg"])
    r.close()
    print(json.dumps(out))


if __name__ == "__main__":
    main()
