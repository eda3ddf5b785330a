#!/usr/bin/env bash
# The Debian packages, built by CPack from a build directory, and the `ratekeeper` package
# installed into this machine with dpkg: the program runs and serves from the installed
# configuration, systemd accepts the unit, and removal and purge leave nothing behind.
#
# It installs a package system-wide, so it must run as root (as scripts/test.sh does), and
# fails otherwise; it also fails, touching nothing, when a `ratekeeper` package is already
# installed. Everything it installs is purged at the end, whatever happens.
#
# usage: deb_test.sh CPACK BUILD_DIR SOURCE_DIR
set -euo pipefail
cpack=$1 build=$2 source=$3
fail() { echo "FAIL: $*" >&2; exit 1; }

((EUID == 0)) || fail "must run as root: the test installs the package with dpkg -i"
command -v dpkg-deb >/dev/null || fail "dpkg-deb is missing (a Debian system is needed)"
status() { dpkg-query -W -f='${Status}' ratekeeper 2>/dev/null || true; }  # empty: unknown
if [[ -n $(status) && $(status) != *" not-installed" ]]; then
  fail "a ratekeeper package is already installed here; the test installs and purges its own: \
remove it first (dpkg --purge ratekeeper)"
fi

pystatus() { dpkg-query -W -f='${Status}' python3-ratekeeper 2>/dev/null || true; }
if [[ -n $(pystatus) && $(pystatus) != *" not-installed" ]]; then
  fail "a python3-ratekeeper package is already installed here: remove it first (dpkg --purge python3-ratekeeper)"
fi

tmp=$(mktemp -d)
installed=0
py_installed=0
server_pid=
cleanup() {
  [[ -n $server_pid ]] && kill -KILL "$server_pid" 2>/dev/null || true
  ((installed)) && dpkg --purge ratekeeper >/dev/null 2>&1 || true
  ((py_installed)) && dpkg --purge python3-ratekeeper >/dev/null 2>&1 || true
  rm -rf "$tmp"
}
trap cleanup EXIT

# Build both packages (CPack's `preinstall` step finds the build directory up to date).
(cd "$build" && "$cpack" -G DEB --config CPackConfig.cmake -B "$tmp/packages") >"$tmp/cpack.log" 2>&1 ||
  { cat "$tmp/cpack.log"; fail "cpack -G DEB"; }
deb=$(echo "$tmp"/packages/ratekeeper_*.deb)
dev=$(echo "$tmp"/packages/libratekeeper-dev_*.deb)
[[ -f $deb && -f $dev ]] || { ls "$tmp/packages"; fail "the packages are not where expected"; }
echo "built $(basename "$deb") ($(du -h "$deb" | cut -f1)), $(basename "$dev") ($(du -h "$dev" | cut -f1))"

field() { dpkg-deb -f "$1" "$2"; }
[[ $(field "$deb" Package) == ratekeeper ]] || fail "Package: $(field "$deb" Package)"
[[ $(field "$deb" Version) =~ ^[0-9]+\.[0-9]+\.[0-9]+-1$ ]] || fail "Version: $(field "$deb" Version)"
[[ $(field "$deb" Depends) == *libc6* && $(field "$deb" Depends) == *libhiredis* ]] ||
  fail "Depends does not come from dpkg-shlibdeps: $(field "$deb" Depends)"
[[ $(field "$deb" Recommends) == *redis-server* ]] || fail "Recommends: $(field "$deb" Recommends)"
[[ $(dpkg-deb -I "$deb" conffiles) == /etc/ratekeeper/ratekeeper.yaml ]] ||
  fail "conffiles: $(dpkg-deb -I "$deb" conffiles 2>&1)"
contents=$(dpkg-deb -c "$deb" | awk '{print $NF}')
for f in ./usr/bin/ratekeeper ./etc/ratekeeper/ratekeeper.yaml ./lib/systemd/system/ratekeeper.service \
         ./usr/share/doc/ratekeeper/service.md; do
  grep -qx "$f" <<<"$contents" || fail "$f is not in $(basename "$deb")"
done
if grep -q '/include/\|\.a$' <<<"$contents"; then fail "the server package holds the library"; fi
contents=$(dpkg-deb -c "$dev" | awk '{print $NF}')
for f in ./usr/include/ratekeeper/store/memory_store.hpp ./usr/lib/libratekeeper.a \
         ./usr/lib/cmake/ratekeeper/ratekeeperConfig.cmake; do
  grep -qx "$f" <<<"$contents" || fail "$f is not in $(basename "$dev")"
done

# Install.
dpkg -i "$deb" >"$tmp/dpkg.log" 2>&1 || { cat "$tmp/dpkg.log"; installed=1; fail "dpkg -i"; }
installed=1
[[ $(status) == "install ok installed" ]] || fail "dpkg -s ratekeeper: $(status)"
/usr/bin/ratekeeper --version | grep -qx "ratekeeper $(field "$deb" Version | cut -d- -f1)" ||
  fail "/usr/bin/ratekeeper --version: $(/usr/bin/ratekeeper --version 2>&1)"
cmp -s /etc/ratekeeper/ratekeeper.yaml "$source/packaging/ratekeeper.yaml" ||
  fail "/etc/ratekeeper/ratekeeper.yaml is not the example configuration"
unit=/lib/systemd/system/ratekeeper.service
grep -qx 'ExecStart=/usr/bin/ratekeeper serve --config /etc/ratekeeper/ratekeeper.yaml' "$unit" ||
  fail "$unit: $(grep ExecStart "$unit")"
for line in 'ExecReload=/bin/kill -HUP $MAINPID' DynamicUser=yes ProtectSystem=strict NoNewPrivileges=yes \
            CapabilityBoundingSet= ConfigurationDirectory=ratekeeper; do
  grep -qxF "$line" "$unit" || fail "$unit: no $line"
done

# systemd's own checks of the unit: no error, no warning (an unknown or misspelled directive
# is only a warning), and its sandbox's exposure at most 1.5 (it is 1.4 with systemd 252;
# leaving out DynamicUser, PrivateDevices or RestrictAddressFamilies makes it 1.7 or more).
if command -v systemd-analyze >/dev/null; then
  if ! out=$(systemd-analyze verify "$unit" 2>&1) || [[ -n $out ]]; then
    fail "systemd-analyze verify $unit:
$out"
  fi
  echo "systemd-analyze verify: clean"
  out=$(systemd-analyze security --offline=true --threshold=15 "$unit" 2>&1) ||
    fail "systemd-analyze security: exposure above 1.5
$out"
  echo "systemd-analyze security: $(grep -o 'Overall exposure level.*' <<<"$out")"
else
  echo "SKIPPED (systemd-analyze is not installed; scripts/deps.sh installs it): systemd-analyze verify"
fi

# The installed program serves from the installed configuration (in memory instead of the
# configured local Redis, on a free port), reloads it on SIGHUP and drains on SIGTERM.
/usr/bin/ratekeeper serve --config /etc/ratekeeper/ratekeeper.yaml --listen 127.0.0.1:0 --store memory:// \
  >"$tmp/serve.log" 2>&1 &
server_pid=$!
address=
for _ in $(seq 100); do
  address=$(grep -o 'listening on 127\.0\.0\.1:[0-9]*' "$tmp/serve.log" | cut -d' ' -f3) && break
  kill -0 "$server_pid" 2>/dev/null || break
  sleep 0.1
done
[[ -n $address ]] || { cat "$tmp/serve.log"; fail "the installed server did not start"; }
[[ $(curl -s -m 5 "http://$address/healthz") == '{"status":"ok"}' ]] || fail "/healthz"
reply=$(curl -s -m 5 "http://$address/v1/check" -d '{"rule":"default","identity":"ip:192.0.2.7"}')
[[ $reply == *'"allowed":true'* && $reply == *'"remaining":99'* ]] || fail "/v1/check: $reply"
# What `systemctl reload` does (ExecReload): SIGHUP, the configuration is read again.
kill -HUP "$server_pid"
reloaded=
for _ in $(seq 50); do
  reloaded=$(curl -s -m 5 "http://$address/metrics" | grep -x 'ratekeeper_config_reloads_total{result="success"} 1') && break
  sleep 0.1
done
[[ -n $reloaded ]] || { cat "$tmp/serve.log"; fail "SIGHUP did not reload the configuration"; }
kill -TERM "$server_pid"
code=0
wait "$server_pid" || code=$?
server_pid=
((code == 0)) || { cat "$tmp/serve.log"; fail "the server exited $code on SIGTERM"; }
echo "served on $address from /etc/ratekeeper/ratekeeper.yaml, reloaded on SIGHUP, drained on SIGTERM"

# A changed configuration survives reinstalling; removal keeps it, purge removes it.
echo "# changed here" >>/etc/ratekeeper/ratekeeper.yaml
dpkg -i "$deb" >"$tmp/dpkg.log" 2>&1 || { cat "$tmp/dpkg.log"; fail "dpkg -i (again)"; }
grep -qx '# changed here' /etc/ratekeeper/ratekeeper.yaml || fail "reinstalling replaced the changed configuration"
dpkg -r ratekeeper >"$tmp/dpkg.log" 2>&1 || { cat "$tmp/dpkg.log"; fail "dpkg -r"; }
[[ ! -e /usr/bin/ratekeeper && ! -e $unit ]] || fail "dpkg -r left the program or the unit"
[[ -f /etc/ratekeeper/ratekeeper.yaml ]] || fail "dpkg -r removed the configuration"
dpkg --purge ratekeeper >"$tmp/dpkg.log" 2>&1 || { cat "$tmp/dpkg.log"; fail "dpkg --purge"; }
installed=0
[[ ! -e /etc/ratekeeper ]] || fail "dpkg --purge left /etc/ratekeeper: $(ls -A /etc/ratekeeper)"
[[ -z $(status) || $(status) == *" not-installed" ]] || fail "after dpkg --purge: $(status)"
echo "installed, removed and purged"

# The Python package, when the build has it: Debian's python3 imports it from
# dist-packages (outside the build tree) and checks with it; it is removed whole.
py=$(echo "$tmp"/packages/python3-ratekeeper_*.deb)
if [[ -f $py ]]; then
  [[ $(field "$py" Depends) == *python3* && $(field "$py" Depends) == *libhiredis* ]] ||
    fail "python3-ratekeeper Depends: $(field "$py" Depends)"
  contents=$(dpkg-deb -c "$py" | awk '{print $NF}')
  for f in ./usr/lib/python3/dist-packages/ratekeeper/__init__.py ./usr/lib/python3/dist-packages/ratekeeper/asgi.py \
           ./usr/lib/python3/dist-packages/ratekeeper/_native.pyi ./usr/lib/python3/dist-packages/ratekeeper/py.typed; do
    grep -qx "$f" <<<"$contents" || fail "$f is not in $(basename "$py")"
  done
  grep -q '^./usr/lib/python3/dist-packages/ratekeeper/_native\.cpython-.*\.so$' <<<"$contents" ||
    fail "the native module is not in $(basename "$py")"
  dpkg -i "$py" >"$tmp/dpkg.log" 2>&1 || { cat "$tmp/dpkg.log"; py_installed=1; fail "dpkg -i $(basename "$py")"; }
  py_installed=1
  (cd "$tmp" && env -u PYTHONPATH /usr/bin/python3 -c '
import ratekeeper, ratekeeper.asgi
assert ratekeeper.__file__.startswith("/usr/lib/python3/dist-packages/"), ratekeeper.__file__
limiter = ratekeeper.Limiter(yaml="rules: [{name: api, limits: [{algorithm: fixed_window, limit: 2, window: 1h}]}]")
assert [limiter.check("api", "user:1").allowed for _ in range(3)] == [True, True, False]
limiter.close()
') || fail "python3 cannot use the installed package"
  dpkg --purge python3-ratekeeper >"$tmp/dpkg.log" 2>&1 || { cat "$tmp/dpkg.log"; fail "dpkg --purge python3-ratekeeper"; }
  py_installed=0
  [[ ! -e /usr/lib/python3/dist-packages/ratekeeper ]] || fail "the purge left the Python package"
  echo "python3-ratekeeper: installed, imported by python3, checked, purged"
fi
