#!/usr/bin/env bash
# Install the Debian packages behind a list of needs, where we are root with apt; otherwise name
# them (what needs them then skips or falls back, and says why).
#
#   tools/sysdeps.sh NEED:PACKAGE ...
#
# NEED is a command on PATH (`gcc`), an absolute path that must exist
# (`/usr/include/infiniband/verbs.h`), or `py:MODULE`, a module /usr/bin/python3 must import
# (`py:pyverbs`: Debian's pyverbs exists only for the distribution's Python).
set -u
missing=""
for pair in "$@"; do
  need=${pair%%:*} pkg=${pair##*:}
  case "$pair" in
    py:*) need=${pair#py:}; need=${need%%:*}
          /usr/bin/python3 -c "import $need" >/dev/null 2>&1 && continue ;;
    /*)   test -e "$need" && continue ;;
    *)    command -v "$need" >/dev/null 2>&1 && continue ;;
  esac
  case " $missing " in *" $pkg "*) ;; *) missing="$missing $pkg" ;; esac
done
[ -n "$missing" ] || exit 0
if [ "$(id -u)" = 0 ] && command -v apt-get >/dev/null 2>&1; then
  echo "installing:$missing"
  export DEBIAN_FRONTEND=noninteractive
  apt-get -o DPkg::Lock::Timeout=300 update -qq \
    && apt-get -o DPkg::Lock::Timeout=300 install -y -qq --no-install-recommends $missing >/dev/null \
    || { echo "sysdeps: apt-get could not install:$missing"; exit 1; }
else
  echo "missing system packages:$missing (not root with apt: what needs them skips and says why)"
fi
