#!/usr/bin/env python3
"""CTest cases of `pdkv demo`: small runs of the real default deployment (Nemotron-3-Nano-30B,
P TP4 -> D TP2, six processes) checked through their exit status and --json summary.

Usage: demo_test.py PDKV_BINARY CASE

Cases:
  shm_read     READ over shm: exit 0, every request completed and every byte verified
  tcp_write    WRITE over tcp: the same
  kill         --kill-prefill-after 2 over tcp: exit 5; the killed rank's D rank fails each later
               request within the deadline, the other D rank completes and verifies every one
  fault_flip   one received byte flipped on D (PDKV_DEMO_FAULT=flip-byte): exit 4, the request
               names the wrong byte (the verification can fail)
  fault_stray  one byte outside every request changed on D (=stray-write): exit 4 from the
               final scan (so can "nothing else changed")
  usage        a bad flag under --json: exit 1, the error names the flag, nothing on stderr

Standard library only. Exits 0 on success, 1 with the failures listed.
"""

import json
import os
import subprocess
import sys

# Small enough for the ASan build (the six ranks register about 360 MiB), large enough that a
# request spans more than one block on both sides and some requests hit partly.
SMALL = ["--requests", "6", "--tokens", "64-2500", "--concurrency", "2", "--seed", "3"]
DEADLINE_MS = 3000


def run(binary, args, env=None):
    e = dict(os.environ)
    e.update(env or {})
    proc = subprocess.run([binary, "demo", *args, "--json"], capture_output=True, text=True, timeout=120, env=e)
    try:
        doc = json.loads(proc.stdout)
    except json.JSONDecodeError as err:
        return proc, None, [f"stdout is not one JSON document ({err}): {proc.stdout[:300]} / stderr: {proc.stderr[:300]}"]
    failures = []
    if proc.stderr:
        failures.append(f"printed on stderr under --json: {proc.stderr.strip()[:300]}")
    if doc.get("exit_status") != proc.returncode:
        failures.append(f"exit_status {doc.get('exit_status')} but the process exited {proc.returncode}")
    if doc.get("command") != "demo" or doc.get("schema_version") != 1:
        failures.append(f"not a demo document: command {doc.get('command')}, schema {doc.get('schema_version')}")
    return proc, doc, failures


def expect(cond, what, failures):
    if not cond:
        failures.append(what)


def check_clean_run(doc, failures, op):
    req = doc["requests"]
    expect(doc["exit_status"] == 0, f"exit status {doc['exit_status']}: {doc['errors']}", failures)
    expect(doc["errors"] == [], f"errors: {doc['errors']}", failures)
    expect(req["total"] == 6 and req["completed"] == 6 and req["failed"] == 0, f"requests {req}", failures)
    expect(req["no_hit"] + req["partial_hit"] + req["full_hit"] == 6, f"hit kinds do not add up: {req}", failures)
    expect(req["partial_hit"] >= 1 and req["full_hit"] >= 1 and req["no_hit"] >= 1,
           f"seed 3 draws requests of each hit kind, got {req}", failures)
    expect(req["with_placeholders"] >= 1, f"align mode lists carry placeholders, got {req}", failures)
    expect(doc["transfers"] == {"completed": 12, "failed": 0}, f"transfers {doc['transfers']}", failures)
    expect(doc["settings"]["op"] == op, f"op {doc['settings']['op']}", failures)
    expect(doc["bytes"] > 0 and doc["bytes"] == doc["attention_bytes"] + doc["mamba_bytes"],
           f"bytes {doc['bytes']} != attention {doc['attention_bytes']} + mamba {doc['mamba_bytes']}", failures)
    expect(0 < doc["descriptors_after_coalescing"] <= doc["descriptors_before_coalescing"],
           f"descriptors {doc['descriptors_before_coalescing']} -> {doc['descriptors_after_coalescing']}", failures)
    v = doc["verification"]
    expect(v["ok"] and v["wrong_ranges"] == 0 and v["changed_regions"] == 0, f"verification {v}", failures)
    # Every moved byte is compared, and the untouched rest of the requests' blocks too.
    expect(v["verified_bytes"] > doc["bytes"], f"verified {v['verified_bytes']} <= moved {doc['bytes']}", failures)
    expect(v["scanned_bytes"] == doc["memory_bytes"], f"scanned {v['scanned_bytes']} of {doc['memory_bytes']}", failures)
    ms = doc["request_ms"]
    expect(ms is not None and 0 <= ms["p50"] <= ms["p99"] <= ms["max"], f"request_ms {ms}", failures)
    expect(doc["gb_per_s"] > 0, f"gb_per_s {doc['gb_per_s']}", failures)
    expect(doc["model"]["layers"] == 52 and doc["model"]["attention_layers"] == 6 and doc["model"]["mamba_layers"] == 23,
           f"model {doc['model']}", failures)
    expect([len(g["layers"]) for g in doc["kv_cache_groups"]] == [6, 6, 6, 5, 6] and doc["regions"] == 6,
           f"groups {doc['kv_cache_groups']}", failures)
    expect(doc["prefill"]["block_size"] == 1056 and doc["decode"]["block_size"] == 2096,
           f"block sizes {doc['prefill']['block_size']} / {doc['decode']['block_size']}", failures)
    expect(doc["kill"] is None, f"kill {doc['kill']}", failures)


def main():
    if len(sys.argv) != 3:
        print(__doc__)
        return 1
    binary, case = sys.argv[1:]
    failures = []
    if case == "shm_read":
        _, doc, failures = run(binary, SMALL + ["--transport", "shm"])
        if doc:
            check_clean_run(doc, failures, "read")
            expect(doc["settings"]["transport"] == "shm", f"transport {doc['settings']}", failures)
    elif case == "tcp_write":
        _, doc, failures = run(binary, SMALL + ["--transport", "tcp", "--op", "write"])
        if doc:
            check_clean_run(doc, failures, "write")
    elif case == "kill":
        _, doc, failures = run(binary, SMALL + ["--transport", "tcp", "--kill-prefill-after", "2",
                                                "--deadline-ms", str(DEADLINE_MS)])
        if doc:
            k = doc["kill"]
            req = doc["requests"]
            expect(doc["exit_status"] == 5, f"exit status {doc['exit_status']}: {doc['errors']}", failures)
            expect(len(doc["errors"]) == 1 and doc["errors"][0]["kind"] == "killed"
                   and doc["errors"][0]["where"] == "--kill-prefill-after", f"errors {doc['errors']}", failures)
            expect(k is not None and k["prefill_rank"] == 3 and k["after_requests"] >= 2, f"kill {k}", failures)
            if k:
                # P rank 3 holds Mamba state D rank 1 reads; D rank 0 never touches it.
                expect(k["affected_decode_ranks"] == [1], f"affected {k['affected_decode_ranks']}", failures)
                expect(k["failed_transfers"] == req["failed"] and req["failed"] >= 1,
                       f"failed transfers {k['failed_transfers']} vs failed requests {req['failed']}", failures)
                expect(k["max_failure_ms"] <= DEADLINE_MS, f"a failure took {k['max_failure_ms']} ms", failures)
                expect(k["unaffected_transfers_after_kill"] >= req["failed"],
                       f"D rank 0 completed {k['unaffected_transfers_after_kill']} after the kill", failures)
                statuses = {x["status"]: x["count"] for x in k["failure_statuses"]}
                expect(set(statuses) <= {"PDKV_ERR_PEER_LOST", "PDKV_ERR_NOT_FOUND", "PDKV_ERR_TIMED_OUT"}
                       and sum(statuses.values()) == k["failed_transfers"], f"statuses {k['failure_statuses']}", failures)
            expect(req["completed"] + req["failed"] == 6 and req["completed"] >= 2, f"requests {req}", failures)
            expect(doc["transfers"]["completed"] == 12 - doc["transfers"]["failed"], f"transfers {doc['transfers']}",
                   failures)
            v = doc["verification"]
            expect(v["ok"] and v["wrong_ranges"] == 0 and v["changed_regions"] == 0, f"verification {v}", failures)
    elif case in ("fault_flip", "fault_stray"):
        fault = "flip-byte" if case == "fault_flip" else "stray-write"
        _, doc, failures = run(binary, SMALL + ["--transport", "shm"], {"PDKV_DEMO_FAULT": fault})
        if doc:
            expect(doc["exit_status"] == 4, f"exit status {doc['exit_status']} with a {fault} fault", failures)
            kinds = {e["kind"] for e in doc["errors"]}
            expect(kinds == {"failed"}, f"errors {doc['errors']}", failures)
            text = " ".join(e["message"] for e in doc["errors"])
            if fault == "flip-byte":
                expect("should hold P rank" in text and doc["verification"]["wrong_ranges"] == 1,
                       f"the flipped byte is not named: {text} / {doc['verification']}", failures)
                expect(doc["requests"]["failed"] == 1, f"requests {doc['requests']}", failures)
            else:
                expect("changed outside the transfers: region 0 offset" in text
                       and doc["verification"]["changed_regions"] == 1,
                       f"the stray byte is not named: {text} / {doc['verification']}", failures)
                expect(doc["requests"]["completed"] == 6, f"requests {doc['requests']}", failures)
            expect(not doc["verification"]["ok"], f"verification {doc['verification']}", failures)
    elif case == "usage":
        proc, doc, failures = run(binary, ["--transport", "smh"])
        if doc:
            expect(proc.returncode == 1, f"exit {proc.returncode}", failures)
            err = doc["errors"][0] if doc["errors"] else {}
            expect(err.get("where") == "--transport" and err.get("suggestion") == "did you mean 'shm'?",
                   f"errors {doc['errors']}", failures)
            expect(doc["requests"] is None and doc["verification"] is None, "demo fields not null", failures)
    else:
        failures.append(f"unknown case {case}")
    if failures:
        print("\n".join("FAIL: " + f for f in failures))
        return 1
    print(f"PASS: {case}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
