# Port helpers shared by scripts/postgres and scripts/postgres-ha (sourced, not run).

# True when nothing accepts connections on 127.0.0.1:$1.
port_free() { ! (exec 3<>"/dev/tcp/127.0.0.1/$1") 2>/dev/null; }

# A random port to listen on, below the kernel's range of ephemeral ports: a port in that
# range can be the local end of an outgoing connection, which nothing listens on (so
# `port_free` passes) but no server can bind either.
random_port() {
    local low _
    read -r low _ </proc/sys/net/ipv4/ip_local_port_range 2>/dev/null || low=32768
    (( low > 21000 )) || low=60000
    printf '%s\n' $((20000 + RANDOM % (low - 20000)))
}
