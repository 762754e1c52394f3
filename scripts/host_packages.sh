#!/usr/bin/env bash
# The Debian packages the platform needs on the host (called by scripts/setup.sh; safe to rerun):
#   bubblewrap (bwrap): the reward jail that runs tenants' python reward code (docs/operator.md, "Reward isolation").
# As root with apt-get it installs what is missing; otherwise it prints the exact command and carries on (the
# platform runs without them; `streamrl doctor` and `streamrl up` say what each missing piece stops).
set -uo pipefail

missing=()
command -v bwrap >/dev/null 2>&1 || missing+=(bubblewrap)
[ ${#missing[@]} -eq 0 ] && { echo "setup: host packages present (bubblewrap)"; exit 0; }

command="apt-get install -y --no-install-recommends ${missing[*]}"
if [ "$(id -u)" = 0 ] && command -v apt-get >/dev/null 2>&1; then
  echo "setup: installing ${missing[*]} ($command)"
  if { DEBIAN_FRONTEND=noninteractive apt-get install -y --no-install-recommends "${missing[@]}" >/dev/null 2>&1 ||
       { apt-get update -qq >/dev/null 2>&1 &&
         DEBIAN_FRONTEND=noninteractive apt-get install -y --no-install-recommends "${missing[@]}" >/dev/null; }; } &&
     command -v bwrap >/dev/null 2>&1; then
    echo "setup: installed ${missing[*]}"
    exit 0
  fi
  echo "setup: could not install ${missing[*]} (or bwrap is not on PATH=$PATH); run: $command" >&2
  exit 0
fi
prefix=$([ "$(id -u)" = 0 ] && echo "" || echo "sudo ")
echo "setup: ${missing[*]} missing (python rewards are refused until it is installed); run: ${prefix}${command}" >&2
