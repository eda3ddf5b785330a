# Sourced by the bench scripts: free loopback ports.
port_in_use() { (exec 3<>"/dev/tcp/127.0.0.1/$1") 2>/dev/null; }
# The first port from $1 on (within 200) that nothing listens on.
free_port() {
  local p
  for p in $(seq "$1" $(($1 + 200))); do
    if ! port_in_use "$p"; then echo "$p"; return; fi
  done
  return 1
}
