# Sourced by ./mount and Tests/run: installs the Debian packages vdrive needs and
# puts the Swift toolchain on PATH. Safe to run again: installed packages are skipped.

VDRIVE_PACKAGES=(pkg-config fuse3 libfuse3-dev libsqlite3-dev libssl-dev libcurl4-openssl-dev libmicrohttpd-dev libpq-dev curl)

vdrive_as_root() {
    if [ "$(id -u)" -eq 0 ]; then "$@"; else sudo "$@"; fi
}

# Installs the given packages (plus the build packages) when any is missing.
vdrive_install_packages() {
    local wanted=("${VDRIVE_PACKAGES[@]}" "$@") missing=()
    for p in "${wanted[@]}"; do
        dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q "install ok installed" || missing+=("$p")
    done
    if [ "${#missing[@]}" -gt 0 ]; then
        echo "Installing Debian packages: ${missing[*]}"
        vdrive_as_root apt-get update -qq
        vdrive_as_root env DEBIAN_FRONTEND=noninteractive apt-get install -y -qq "${missing[@]}" >/dev/null
    fi
}

vdrive_find_swift() {
    if ! command -v swift >/dev/null 2>&1; then
        for d in /opt/swift/usr/bin /usr/share/swift/usr/bin "$HOME/.swiftly/bin"; do
            [ -x "$d/swift" ] && export PATH="$d:$PATH" && break
        done
    fi
    if ! command -v swift >/dev/null 2>&1; then
        echo "error: the Swift toolchain (6.x) is not installed or not on PATH; install it from swift.org and run this again" >&2
        exit 69
    fi
}
