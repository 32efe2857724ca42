"""The child process of the conformance suite (conformance/README.md, "The child process
protocol"), on the blocking API: it holds one lease for the runner, which stops and continues
it with signals."""

from __future__ import annotations

import logging
import os
import sys

import dlock_client as dl

from api_sync import classify


def main() -> None:
    logging.basicConfig(level=logging.ERROR)  # stdout is the protocol's; the loss is answered there
    client = dl.Client(os.environ["DLOCK_CONFORMANCE_CHILD_DSN"],
                       pooler=os.environ.get("DLOCK_CONFORMANCE_CHILD_POOLER", "session"))
    lease: dl.Lease | None = None
    print(f"ready {os.getpid()}", flush=True)
    for line in sys.stdin:
        words = line.split()
        try:
            if words[:1] == ["lock"] and len(words) == 3:
                lease = client.lock(words[1], ttl=int(words[2]) / 1000).acquire()
                answer = f"ok {lease.fence}"
            elif words[:1] == ["wait_lost"] and len(words) == 2 and lease is not None:
                answer = f"ok {str(lease.lost.wait(int(words[1]) / 1000)).lower()}"
            elif words == ["release"] and lease is not None:
                answer = f"ok {str(lease.release()).lower()}"
            elif words == ["quit"]:
                print("ok bye", flush=True)
                break
            else:
                answer = "error Protocol -"
        except Exception as e:  # noqa: BLE001 - every error is an answer
            kind, sqlstate = classify(e) or ("Unexpected", None)
            answer = f"error {kind} {sqlstate or '-'}"
        print(answer, flush=True)
    client.close()


if __name__ == "__main__":
    main()
