"""Write the peer kit's MANIFEST.json and place its archives (cut in parts when one is over the limit).

    python3 manifest.py KIT_DIR PART_MIB MODULES_TXT NAME=ARCHIVE...

MANIFEST.json: {"archives": {name: {"version", "parts": [file names], "bytes", "sha256"}}, "fi_modules": [...]}
bench/peerkit.py reads it on the GPU machine.
"""
import hashlib
import json
import os
import sys

VERSIONS = {"fi": "flashinfer-python 0.7.2.post1 (+ apache-tvm-ffi 0.1.15.post2)",
            "fa4": "flash-attn-4 4.0.0b36, quack-kernels 0.6.5, nvidia-cutlass-dsl 4.8.1"}


def main(kit, part_mib, modules_txt, archives):
    limit = int(part_mib) << 20
    man = {"archives": {}, "fi_modules": []}
    with open(modules_txt) as f:
        man["fi_modules"] = sorted({line.split()[1] for line in f if line.startswith("MODULE ")})
    for item in archives:
        name, path = item.split("=", 1)
        data = open(path, "rb").read()
        base = os.path.basename(path)
        if len(data) <= limit:
            parts = [base]
            chunks = [data]
        else:
            chunks = [data[i:i + limit] for i in range(0, len(data), limit)]
            parts = [f"{base}.{i + 1}" for i in range(len(chunks))]
        for p, chunk in zip(parts, chunks):
            with open(os.path.join(kit, p), "wb") as f:
                f.write(chunk)
        man["archives"][name] = {"version": VERSIONS.get(name, "?"), "parts": parts, "bytes": len(data),
                                 "sha256": hashlib.sha256(data).hexdigest()}
    with open(os.path.join(kit, "MANIFEST.json"), "w") as f:
        json.dump(man, f, indent=1, sort_keys=True)
        f.write("\n")
    for name, a in man["archives"].items():
        print(f"{name}: {a['bytes'] / 2**20:.1f} MiB in {len(a['parts'])} part(s): {' '.join(a['parts'])}")


if __name__ == "__main__":
    if len(sys.argv) < 5:
        raise SystemExit(__doc__)
    main(sys.argv[1], sys.argv[2], sys.argv[3], sys.argv[4:])
