#!/usr/bin/env bash
# verify-oci.sh builds deploy/docker/Dockerfile, unchanged, with buildah (no Docker engine, no
# daemon) and runs the image it makes, on a machine that cannot pull from a container registry.
#
# The Dockerfile's two base images are replaced by local stand-ins under their exact names, so
# that the build finds them in local storage and pulls nothing (--pull=never):
#
#   golang:GO_VERSION           a static busybox for /bin/sh, this machine's Go toolchain in
#                               /usr/local/go, CA certificates, and this machine's GOPROXY and
#                               GOSUMDB (the build downloads modules through the Go module proxy)
#   gcr.io/distroless/static-debian12:nonroot
#                               as distroless/static lays it out: /etc/passwd and /etc/group
#                               with nonroot (65532), CA certificates, time zone data, /tmp,
#                               /home/nonroot, USER 65532; no shell and no C library
#
# Then it checks the image: its configuration (user, entry point, command, health check,
# ports), that its binaries are static Go binaries (they run on a base with no C library,
# and `go version -m` says CGO_ENABLED=0), that `sluice version` prints the build's version,
# and it runs the entry point on the embedded default configuration in a network namespace of
# its own: the gateway's and the admin API's ports accept connections, the image's health check
# exits 0 against it, the process runs as 65532, and SIGTERM stops it with status 0.
#
# Needs: bash, buildah, go (GO_VERSION as the Dockerfile's ARG), a statically linked busybox
# (Debian: busybox-static), unshare (util-linux), CA certificates and time zone data, and root.
# Everything goes into a fresh directory, removed at the end: buildah's storage (vfs driver, so
# no overlay mount support is needed), its cache mounts and the stand-ins' root file systems;
# nothing is written to buildah's default storage.
#
# Usage, from anywhere in the repository:
#
#   deploy/docker/verify-oci.sh
#
# Environment: BUSYBOX (a static busybox; default: busybox on PATH), CA_BUNDLE (default: the
# first of the usual bundle paths), ZONEINFO (default /usr/share/zoneinfo), VERIFY_OCI_KEEP=1
# (keep the work directory and print its path). RUN steps and the runs use buildah's chroot
# isolation, which needs no OCI runtime and no cgroups.
#
# It prints one "ok: ..." line per check and "verify-oci: PASS" at the end; any failed check
# prints "verify-oci: FAIL: ..." and exits 1.
set -euo pipefail

fail() {
	echo "verify-oci: FAIL: $*" >&2
	exit 1
}
ok() { echo "ok: $*"; }

root=$(cd "$(dirname "$0")/../.." && pwd)
dockerfile=deploy/docker/Dockerfile
cd "$root"
[ -f "$dockerfile" ] || fail "$dockerfile not found under $root"

# --- What is needed -------------------------------------------------------------------------

for tool in buildah go unshare; do
	command -v "$tool" >/dev/null || fail "$tool is not on PATH"
done
[ "$(id -u)" = 0 ] || fail "run as root: the stand-ins are made in mounted containers"

busybox=${BUSYBOX:-$(command -v busybox || true)}
[ -n "$busybox" ] && [ -x "$busybox" ] || fail "no busybox: install a static one (Debian: busybox-static) or set BUSYBOX"
if command -v ldd >/dev/null && ldd "$busybox" >/dev/null 2>&1; then
	fail "$busybox is dynamically linked; the stand-in builder has no C library (Debian: busybox-static)"
fi

ca_bundle=${CA_BUNDLE:-}
if [ -z "$ca_bundle" ]; then
	for f in /etc/ssl/certs/ca-certificates.crt /etc/pki/tls/certs/ca-bundle.crt /etc/ssl/cert.pem; do
		if [ -f "$f" ]; then
			ca_bundle=$f
			break
		fi
	done
fi
[ -n "$ca_bundle" ] && [ -f "$ca_bundle" ] || fail "no CA certificate bundle: set CA_BUNDLE"
zoneinfo=${ZONEINFO:-/usr/share/zoneinfo}
[ -f "$zoneinfo/UTC" ] || fail "no time zone data in $zoneinfo: set ZONEINFO"

# The base images, as the Dockerfile names them.
go_version=$(sed -n 's/^ARG GO_VERSION=//p' "$dockerfile")
[ -n "$go_version" ] || fail "$dockerfile has no ARG GO_VERSION="
builder_image="golang:$go_version"
final_image=$(awk 'toupper($1) == "FROM" { img = ""; for (i = 2; i <= NF; i++) if ($i !~ /^--/) { img = $i; break } } END { print img }' "$dockerfile")
[ -n "$final_image" ] || fail "$dockerfile has no FROM"
case "$final_image" in
*@*) fail "$final_image is pinned by digest, which a local stand-in cannot have: verify the Dockerfile without the pin" ;;
esac
grep -q "^FROM .*golang:\${GO_VERSION}" "$dockerfile" || fail "$dockerfile does not build FROM golang:\${GO_VERSION}"

goroot=$(go env GOROOT)
host_go=$(go env GOVERSION)
case "$host_go" in
go"$go_version" | go"$go_version".*) ;;
*) fail "the stand-in for $builder_image would hold $host_go: use Go $go_version" ;;
esac
goarch=$(go env GOARCH)

# --- A private buildah ----------------------------------------------------------------------

work=$(mktemp -d "${TMPDIR:-/tmp}/verify-oci.XXXXXX")
mkdir -p "$work/tmp"
bah() {
	TMPDIR="$work/tmp" buildah --root "$work/storage" --runroot "$work/run" --storage-driver vfs "$@"
}
export BUILDAH_ISOLATION=chroot
gateway_pid=
cleanup() {
	if [ -n "$gateway_pid" ]; then
		kill -KILL "$gateway_pid" 2>/dev/null || true
		wait "$gateway_pid" 2>/dev/null || true
	fi
	bah unmount --all >/dev/null 2>&1 || true
	bah rm --all >/dev/null 2>&1 || true
	if [ "${VERIFY_OCI_KEEP:-}" = 1 ]; then
		echo "verify-oci: kept $work"
	else
		rm -rf "$work"
	fi
}
trap cleanup EXIT

# --- The stand-in builder: golang:GO_VERSION ------------------------------------------------

echo "verify-oci: making $builder_image from $host_go in $goroot and $busybox"
c=$(bah from scratch)
mnt=$(bah mount "$c")
mkdir -p "$mnt/bin" "$mnt/etc/ssl/certs" "$mnt/usr/local" "$mnt/go/bin" "$mnt/root" "$mnt/tmp"
chmod 1777 "$mnt/tmp"
cp "$busybox" "$mnt/bin/busybox"
for applet in $("$busybox" --list); do
	[ -e "$mnt/bin/$applet" ] || ln -s busybox "$mnt/bin/$applet"
done
cp -a "$goroot" "$mnt/usr/local/go"
cp "$ca_bundle" "$mnt/etc/ssl/certs/ca-certificates.crt"
printf 'root:x:0:0:root:/root:/bin/sh\n' >"$mnt/etc/passwd"
printf 'root:x:0:\n' >"$mnt/etc/group"
printf 'hosts: files dns\n' >"$mnt/etc/nsswitch.conf"
bah unmount "$c" >/dev/null
envs=(--env PATH=/go/bin:/usr/local/go/bin:/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin
	--env GOLANG_VERSION="${host_go#go}" --env GOPATH=/go --env GOTOOLCHAIN=local)
for v in GOPROXY GOSUMDB GONOSUMDB GOPRIVATE GONOPROXY; do
	val=$(go env "$v")
	[ -z "$val" ] || envs+=(--env "$v=$val")
done
bah config "${envs[@]}" --workingdir /go --cmd /bin/sh "$c"
bah commit --quiet --format docker --rm "$c" "$builder_image" >/dev/null

# --- The stand-in final base: distroless/static, nonroot ------------------------------------

echo "verify-oci: making $final_image"
c=$(bah from scratch)
mnt=$(bah mount "$c")
mkdir -p "$mnt/etc/ssl/certs" "$mnt/usr/share" "$mnt/tmp" "$mnt/home/nonroot" "$mnt/root"
chmod 1777 "$mnt/tmp"
chmod 700 "$mnt/home/nonroot" "$mnt/root"
chown 65532:65532 "$mnt/home/nonroot"
cp "$ca_bundle" "$mnt/etc/ssl/certs/ca-certificates.crt"
cp -a "$zoneinfo" "$mnt/usr/share/zoneinfo"
cat >"$mnt/etc/passwd" <<'EOF'
root:x:0:0:root:/root:/sbin/nologin
nobody:x:65534:65534:nobody:/nonexistent:/sbin/nologin
nonroot:x:65532:65532:nonroot:/home/nonroot:/sbin/nologin
EOF
cat >"$mnt/etc/group" <<'EOF'
root:x:0:
nobody:x:65534:
tty:x:5:
staff:x:50:
nonroot:x:65532:
EOF
printf 'hosts: files dns\n' >"$mnt/etc/nsswitch.conf"
bah unmount "$c" >/dev/null
bah config --user 65532:65532 --workingdir /home/nonroot \
	--env PATH=/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin \
	--env SSL_CERT_FILE=/etc/ssl/certs/ca-certificates.crt "$c"
bah commit --quiet --format docker --rm "$c" "$final_image" >/dev/null

# --- The build, from the real Dockerfile --------------------------------------------------------

version=verify-oci
tag=localhost/sluice:verify-oci
echo "verify-oci: buildah build -f $dockerfile"
# docker format: the OCI image configuration has no HEALTHCHECK. --platform: BuildKit sets
# TARGETOS and TARGETARCH (the Dockerfile cross-compiles with them) for every build; some
# buildah versions set them only when a platform is given.
bah build --pull=never --format docker --layers=false --platform "linux/$goarch" \
	-f "$dockerfile" -t "$tag" --build-arg VERSION="$version" . ||
	fail "buildah build -f $dockerfile failed"
ok "buildah build -f $dockerfile, with nothing pulled"

# --- The image's configuration ------------------------------------------------------------

inspect() { bah inspect --type image --format "$1" "$tag"; }
expect() { # what, got, want
	[ "$2" = "$3" ] || fail "$1: got \"$2\", want \"$3\""
}
expect "image user" "$(inspect '{{.Docker.Config.User}}')" "65532:65532"
expect "image entry point" "$(inspect '{{.Docker.Config.Entrypoint}}')" "[/usr/local/bin/sluice]"
expect "image command" "$(inspect '{{.Docker.Config.Cmd}}')" "[serve]"
expect "image ports" "$(inspect '{{range $p, $_ := .Docker.Config.ExposedPorts}}{{$p}} {{end}}')" "8080/tcp 9090/tcp "
expect "image stop signal" "$(inspect '{{.Docker.Config.StopSignal}}')" "SIGTERM"
expect "image health check" "$(inspect '{{.Docker.Config.Healthcheck.Test}}')" "[CMD /usr/local/bin/sluice-healthcheck]"
expect "image architecture" "$(inspect '{{.Docker.Architecture}}')" "$goarch"
expect "image version label" "$(inspect '{{index .Docker.Config.Labels "org.opencontainers.image.version"}}')" "$version"
ok "image configuration: user 65532:65532, entry point sluice serve, ports 8080 9090, SIGTERM, health check sluice-healthcheck, $goarch"

# --- Its file system ------------------------------------------------------------------------

c=$(bah from --pull=never "$tag")
mnt=$(bah mount "$c")
for f in /bin/sh /bin/busybox; do
	[ ! -e "$mnt$f" ] || fail "the image has $f: the final stage is not the distroless base"
done
for f in /lib /lib64 /usr/lib; do
	[ -z "$(find "$mnt$f" -name 'ld-*.so*' 2>/dev/null)" ] || fail "the image has a dynamic loader in $f"
done
for b in sluice sluice-healthcheck; do
	bin=$mnt/usr/local/bin/$b
	[ -x "$bin" ] || fail "/usr/local/bin/$b is missing"
	info=$(go version -m "$bin") || fail "go version -m /usr/local/bin/$b: not a Go binary"
	grep -q 'build[[:space:]]CGO_ENABLED=0' <<<"$info" || fail "/usr/local/bin/$b was built with cgo"
	grep -q 'build[[:space:]]-trimpath=true' <<<"$info" || fail "/usr/local/bin/$b was built without -trimpath"
	grep -q "build[[:space:]]GOARCH=$goarch" <<<"$info" || fail "/usr/local/bin/$b is not for $goarch"
done
ok "binaries: /usr/local/bin/sluice and sluice-healthcheck, CGO_ENABLED=0 -trimpath; no shell, no C library, no dynamic loader"

# --- Running it -----------------------------------------------------------------------------

out=$(bah run "$c" -- /usr/local/bin/sluice version) || fail "sluice version in the image failed: $out"
expect "sluice version in the image" "$out" "sluice $version"
ok "sluice version in the image (a static binary on a base with no C library): $out"

# The embedded default configuration listens on 127.0.0.1:8080 and :9090: a network namespace
# of its own keeps those ports off this machine's, and the checks go into the same namespace.
probe=$work/probe.sh
cat >"$probe" <<'EOF'
set -u
work=$WORK
tcp_open() { (exec 3<>"/dev/tcp/127.0.0.1/$1") 2>/dev/null; }
"$BUSYBOX" ip link set lo up || { echo "probe: cannot bring up lo"; exit 1; }
# The entry point and command, as a container engine runs them, as the image's user.
bah run "$C" -- /usr/local/bin/sluice serve >"$WORK/gateway.log" 2>&1 &
runner=$!
# The gateway process: the descendant of buildah run whose executable is the image's sluice.
descends() { # pid ancestor
	local p=$1
	for _ in 1 2 3 4 5 6 7 8; do
		p=$(awk '/^PPid:/ { print $2 }' "/proc/$p/status" 2>/dev/null) || return 1
		[ -n "$p" ] && [ "$p" != 0 ] || return 1
		[ "$p" != "$2" ] || return 0
	done
	return 1
}
pid=
healthy=
for _ in $(seq 1 300); do
	if [ -z "$pid" ]; then
		for p in /proc/[0-9]*; do
			exe=$(readlink "$p/exe" 2>/dev/null) || continue
			if [ "${exe%/usr/local/bin/sluice}" != "$exe" ] && descends "${p#/proc/}" "$runner"; then
				pid=${p#/proc/}
				break
			fi
		done
	fi
	if [ -n "$pid" ] && tcp_open 9090 && tcp_open 8080; then
		healthy=1
		break
	fi
	kill -0 "$runner" 2>/dev/null || break
	sleep 0.1
done
[ -n "$healthy" ] || { echo "probe: the gateway did not listen on 8080 and 9090"; cat "$WORK/gateway.log"; exit 1; }
echo "ok: the gateway listens on 127.0.0.1:8080 and the admin API on 127.0.0.1:9090 (embedded default configuration)"
uid=$(awk '/^Uid:/ { print $2, $3, $4, $5 }' "/proc/$pid/status")
gid=$(awk '/^Gid:/ { print $2, $3, $4, $5 }' "/proc/$pid/status")
[ "$uid" = "65532 65532 65532 65532" ] && [ "$gid" = "65532 65532 65532 65532" ] ||
	{ echo "probe: the gateway runs as uid $uid, gid $gid"; exit 1; }
echo "ok: the gateway runs as uid 65532, gid 65532"
# The image's HEALTHCHECK command, as a container engine runs it: in the same container.
if ! hc=$(bah run "$C" -- $HEALTHCHECK 2>&1); then
	echo "probe: the health check failed: $hc"
	cat "$WORK/gateway.log"
	exit 1
fi
echo "ok: the health check ($HEALTHCHECK) exits 0: $hc"
# docker stop: the stop signal, then the gateway drains (nothing in flight) and exits 0.
kill -TERM "$pid"
wait "$runner"
status=$?
[ "$status" = 0 ] || { echo "probe: after SIGTERM the gateway exited with status $status"; cat "$WORK/gateway.log"; exit 1; }
echo "ok: SIGTERM stops the gateway with status 0"
EOF
healthcheck=$(inspect '{{range $i, $a := .Docker.Config.Healthcheck.Test}}{{if $i}}{{$a}} {{end}}{{end}}')
healthcheck=${healthcheck% }
export -f bah
if ! C=$c WORK=$work BUSYBOX=$busybox HEALTHCHECK=$healthcheck \
	unshare --net bash "$probe"; then
	fail "running the image (see above)"
fi
grep -q . "$work/gateway.log" && sed 's/^/gateway: /' "$work/gateway.log" | head -n 20

echo "verify-oci: PASS"
