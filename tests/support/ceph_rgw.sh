#!/usr/bin/env bash
# A single-host Ceph cluster serving S3 (RADOS Gateway) on 127.0.0.1, for the tests:
#   tests/support/ceph_rgw.sh start DIR [OWNER]   starts it under DIR (which must be empty or missing)
#                                 and prints, one per line: endpoint=URL access_key=K
#                                 secret_key=S pids=PID... (also kept in DIR/pids). With OWNER
#                                 (a PID), a watchdog stops it all once OWNER is gone, so a test
#                                 binary that crashes leaves no Ceph behind.
#   tests/support/ceph_rgw.sh stop DIR    ends the processes listed in DIR/pids (by PID) and removes DIR
#   tests/support/ceph_rgw.sh stop-rgw DIR / start-rgw DIR   stops / restarts only the gateway (fault tests)
# One monitor, one OSD on memstore, no manager, radosgw with the beast frontend; no cephx
# (auth none), so nothing secret but the S3 user's keys, which are made up per run. Ports are
# picked free from 127.0.0.1 so parallel runs do not meet. See docs/s3.md and DESIGN.md §9.
set -euo pipefail

die() { echo "ceph_rgw.sh: $*" >&2; exit 1; }

free_port() {
  /usr/bin/python3 -c 'import socket; s=socket.socket(); s.bind(("127.0.0.1",0)); print(s.getsockname()[1])'
}

wait_for() {  # wait_for SECONDS CMD...: runs CMD until it succeeds
  local deadline=$((SECONDS + $1)); shift
  until "$@" >/dev/null 2>&1; do
    ((SECONDS < deadline)) || return 1
    sleep 0.1
  done
}

start_rgw() {
  local dir=$1
  radosgw -c "$dir/ceph.conf" -n client.rgw -f >>"$dir/rgw.out" 2>&1 &
  echo $! >"$dir/rgw.pid"
  echo $! >>"$dir/pids"
  local endpoint
  endpoint=$(cat "$dir/endpoint")
  wait_for 60 curl -sf -o /dev/null "$endpoint/" || die "radosgw did not answer on $endpoint (see $dir/rgw.log)"
}

# Whether PID runs (a zombie does not: a test binary that is a child subreaper may reap the
# gateway it restarted only later).
alive() { [[ -e /proc/$1/stat ]] && [[ $(sed 's/.*) //' "/proc/$1/stat" | cut -c1) != Z ]]; }

stop_rgw() {  # killed, as a crash or an outage would: the fault tests' "endpoint goes away"
  local dir=$1 pid
  pid=$(cat "$dir/rgw.pid" 2>/dev/null) || return 0
  kill -9 "$pid" 2>/dev/null || true
  for _ in $(seq 100); do alive "$pid" || break; sleep 0.02; done
  # Its PID may be reused by anyone: it leaves the list of what stop ends.
  grep -vx "$pid" "$dir/pids" >"$dir/pids.new" || true
  mv "$dir/pids.new" "$dir/pids"
  rm -f "$dir/rgw.pid"
}

start() {
  local dir=$1
  [[ -e $dir && -n $(ls -A "$dir" 2>/dev/null) ]] && die "$dir is not empty"
  mkdir -p "$dir"/{mon,osd,run,log}
  dir=$(cd "$dir" && pwd)
  local mon_port rgw_port fsid
  mon_port=$(free_port); rgw_port=$(free_port)
  fsid=$(cat /proc/sys/kernel/random/uuid)
  cat >"$dir/ceph.conf" <<EOF
[global]
fsid = $fsid
mon host = v2:127.0.0.1:$mon_port
mon initial members = a
public addr = 127.0.0.1
auth cluster required = none
auth service required = none
auth client required = none
ms bind ipv6 = false
run dir = $dir/run
admin socket = $dir/run/\$name.asok
log file = $dir/log/\$name.log
pid file = $dir/run/\$name.pid
osd objectstore = memstore
memstore device bytes = 1073741824
osd pool default size = 1
osd pool default min size = 1
osd pool default pg num = 8
osd pool default pgp num = 8
osd pool default pg autoscale mode = off
mon allow pool size one = true
mon max pg per osd = 1000
mon allow pool delete = true
paxos propose interval = 0.05
# A killed gateway's watches on its notify objects expire after this; the next one's
# metadata writes (bucket creation) wait for them (30 s by default).
osd client watch timeout = 3
osd crush chooseleaf type = 0
osd data = $dir/osd/\$name
mon data = $dir/mon/\$name
osd memory target = 268435456
osd max object name len = 460
osd max object namespace len = 64
[client]
ms mon client mode = crc
[client.rgw]
rgw frontends = beast endpoint=127.0.0.1:$rgw_port tcp_nodelay=1
rgw dns name = localhost
rgw thread pool size = 64
EOF
  echo "http://127.0.0.1:$rgw_port" >"$dir/endpoint"
  : >"$dir/pids"
  local conf=$dir/ceph.conf
  monmaptool --create --add a "v2:127.0.0.1:$mon_port" --fsid "$fsid" "$dir/monmap" >/dev/null
  ceph-mon -c "$conf" -i a --mkfs --monmap "$dir/monmap" >/dev/null 2>"$dir/mon.out"
  ceph-mon -c "$conf" -i a -f >>"$dir/mon.out" 2>&1 &
  echo $! >>"$dir/pids"
  wait_for 30 ceph -c "$conf" --connect-timeout 2 mon stat || die "ceph-mon did not start (see $dir/log)"
  local id
  id=$(ceph -c "$conf" osd create)
  mkdir -p "$dir/osd/osd.$id"
  ceph-osd -c "$conf" -i "$id" --mkfs >"$dir/osd.out" 2>&1 || die "ceph-osd --mkfs failed (see $dir/osd.out)"
  ceph-osd -c "$conf" -i "$id" -f >>"$dir/osd.out" 2>&1 &
  echo $! >>"$dir/pids"
  wait_for 60 bash -c "ceph -c '$conf' osd stat | grep -q '1 up'" || die "ceph-osd did not come up (see $dir/log)"
  start_rgw "$dir"
  local access secret
  access=$(head -c 10 /dev/urandom | od -An -tx1 | tr -d ' \n' | tr a-f A-F)
  secret=$(head -c 20 /dev/urandom | od -An -tx1 | tr -d ' \n')
  radosgw-admin -c "$conf" user create --uid=dsfs-test --display-name=dsfs-test \
    --access-key="$access" --secret-key="$secret" >/dev/null 2>"$dir/admin.out" ||
    die "radosgw-admin user create failed (see $dir/admin.out)"
  printf 'access_key=%s\nsecret_key=%s\n' "$access" "$secret" >"$dir/keys"
  chmod 600 "$dir/keys"
  echo "endpoint=$(cat "$dir/endpoint")"
  cat "$dir/keys"
  echo "pids=$(tr '\n' ' ' <"$dir/pids")"
}

stop() {
  local dir=$1 pid
  [[ -f $dir/pids ]] || { rm -rf "$dir"; return 0; }
  # memstore keeps nothing worth a clean shutdown: a second's grace, then SIGKILL.
  for pid in $(tac "$dir/pids"); do kill "$pid" 2>/dev/null || true; done
  for pid in $(cat "$dir/pids"); do
    for _ in $(seq 20); do alive "$pid" || break; sleep 0.05; done
    kill -9 "$pid" 2>/dev/null || true
  done
  rm -rf "$dir"
}

case "${1:-}" in
  start)
    [[ $# == 2 || $# == 3 ]] || die "usage: $0 start DIR [OWNER_PID]"
    start "$2"
    if [[ $# == 3 ]]; then
      dir=$(cd "$2" && pwd)
      (trap '' HUP; while kill -0 "$3" 2>/dev/null && [[ -f $dir/pids ]]; do sleep 1; done
       "$0" stop "$dir") </dev/null >/dev/null 2>&1 &
    fi
    ;;
  stop) [[ $# == 2 ]] || die "usage: $0 stop DIR"; stop "$2" ;;
  stop-rgw) stop_rgw "$2" ;;
  start-rgw) start_rgw "$(cd "$2" && pwd)" ;;
  *) die "usage: $0 start|stop|stop-rgw|start-rgw DIR" ;;
esac
