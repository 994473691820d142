#!/usr/bin/env python3
"""The source tree's layering (part of make test): which folder's code may include which.
Every #include "dir/..." of the project's own headers is checked against RULES; a new edge
is either a design decision (add it here, with why) or a cycle to avoid.
Usage: check_layering.py SOURCE_DIR."""
import os
import re
import sys

# folder -> the project folders its sources may include (besides its own). Longest match wins.
RULES = {
    "spec": [],  # the model spec: leaf (no common/, which builds on it)
    "common": ["spec"],
    "proto": [],
    # The coordinator reads model files (the model-file library, not the engine).
    "coordinator": ["common", "spec", "worker/engine/model_file.h",
                    "worker/engine/architecture.h"],
    "ctl": ["common", "spec"],
    "worker/cuda_runtime": [],
    # Collectives move floats; they never see the engine (the NCCL one uses the CUDA runtime).
    "worker/collective": ["common", "spec", "worker/cuda_runtime"],
    "worker/engine": ["common", "spec", "worker/cuda_runtime"],
    "worker/data": ["common", "spec"],
    "worker": ["common", "spec"],
}
PROJECT_DIRS = ("common/", "spec/", "worker/", "coordinator/", "ctl/", "proto/")
INCLUDE = re.compile(r'^\s*#\s*include\s+"([^"]+)"', re.M)


def rule_for(path):
    best = None
    for folder in RULES:
        if path == folder or path.startswith(folder + "/"):
            if best is None or len(folder) > len(best):
                best = folder
    return best


def allowed(folder, target):
    if target.startswith(folder + "/"):
        return True
    return any(target == a or target.startswith(a.rstrip("/") + "/") for a in RULES[folder])


def main():
    root = sys.argv[1] if len(sys.argv) > 1 else "."
    problems = []
    checked = 0
    for top in ("spec", "common", "coordinator", "ctl", "worker"):
        for dirpath, _, files in os.walk(os.path.join(root, top)):
            for name in files:
                if not name.endswith((".h", ".cc", ".cu")):
                    continue
                path = os.path.relpath(os.path.join(dirpath, name), root)
                folder = rule_for(path)
                text = open(os.path.join(root, path), encoding="utf-8", errors="replace").read()
                for target in INCLUDE.findall(text):
                    if not target.startswith(PROJECT_DIRS):
                        continue
                    checked += 1
                    if not allowed(folder, target):
                        problems.append(f"{path}: includes {target}, which {folder}/ may not")
    for p in problems:
        print("FAIL:", p)
    if problems:
        return 1
    print(f"layering: {checked} includes of the project's headers follow the rules")
    return 0


if __name__ == "__main__":
    sys.exit(main())
