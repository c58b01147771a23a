#!/usr/bin/env bash
# Mints a local CA and certificates for trying TLS and client certificates
# (docs/security.md). For local use and tests: a real deployment takes its
# certificates from its own CA.
#
#   scripts/mint-certs.sh DIR [--server NAME]... [--client NAME]...
#
# DIR/ca.crt, ca.key                 the CA (clients trust ca.crt: --ca)
# DIR/server.crt, server.key         the server's, for localhost, 127.0.0.1
#                                    and every --server NAME
# DIR/client-NAME.crt, .key          a client certificate whose common name
#                                    and DNS name are NAME (for a token's
#                                    `certificates`)
# Keys are ECDSA P-256, made 0600; certificates last 825 days.
set -euo pipefail

if [ $# -lt 1 ] || [ "${1#-}" != "$1" ]; then
    sed -n '2,17p' "$0" | sed 's/^# \{0,1\}//'
    exit 2
fi
command -v openssl >/dev/null || {
    echo "mint-certs: openssl is needed (Debian: apt-get install openssl)" >&2
    exit 1
}
dir=$1
shift
servers=(localhost)
ips=(127.0.0.1)
clients=()
while [ $# -gt 0 ]; do
    case "$1" in
        --server) servers+=("$2"); shift 2 ;;
        --client) clients+=("$2"); shift 2 ;;
        *) echo "mint-certs: unknown argument $1" >&2; exit 2 ;;
    esac
done
mkdir -p "$dir"
umask 077
days=825

key() { openssl genpkey -algorithm EC -pkeyopt ec_paramgen_curve:P-256 -out "$1" 2>/dev/null; }

if [ ! -f "$dir/ca.key" ]; then
    key "$dir/ca.key"
    openssl req -x509 -new -key "$dir/ca.key" -sha256 -days "$days" \
        -subj "/CN=fila local CA" \
        -addext "basicConstraints=critical,CA:TRUE" \
        -addext "keyUsage=critical,keyCertSign,cRLSign" \
        -out "$dir/ca.crt"
fi

# sign NAME SUBJECT EXT: a certificate DIR/NAME.crt signed by the CA.
sign() {
    local name=$1 subject=$2 ext=$3
    key "$dir/$name.key"
    openssl req -new -key "$dir/$name.key" -subj "$subject" -out "$dir/$name.csr"
    printf '%s\n' "$ext" > "$dir/$name.ext"
    openssl x509 -req -in "$dir/$name.csr" -CA "$dir/ca.crt" -CAkey "$dir/ca.key" \
        -CAcreateserial -days "$days" -sha256 -extfile "$dir/$name.ext" \
        -out "$dir/$name.crt" 2>/dev/null
    rm -f "$dir/$name.csr" "$dir/$name.ext"
}

san="subjectAltName="
for s in "${servers[@]}"; do san+="DNS:$s,"; done
for i in "${ips[@]}"; do san+="IP:$i,"; done
sign server "/CN=${servers[-1]}" "basicConstraints=CA:FALSE
keyUsage=critical,digitalSignature
extendedKeyUsage=serverAuth
${san%,}"

for c in "${clients[@]}"; do
    sign "client-$c" "/CN=$c" "basicConstraints=CA:FALSE
keyUsage=critical,digitalSignature
extendedKeyUsage=clientAuth
subjectAltName=DNS:$c"
done
chmod 0644 "$dir"/*.crt
echo "mint-certs: $dir: ca.crt, server.crt (${servers[*]} ${ips[*]})${clients:+, client-*.crt (${clients[*]})}"
