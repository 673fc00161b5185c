#!/usr/bin/env bash
# A single-node Kubernetes on this machine for the e2e suite (docs/e2e.md):
# etcd, kube-apiserver, kube-controller-manager, kube-scheduler, containerd
# with runc and the CNI bridge, kubelet, kube-proxy (iptables) and CoreDNS,
# all host processes, everything under STATE. Run as root.
#
#   cluster.sh up STATE BIN_DIR IMAGE_TAR...   start, import the images, wait
#                                              until the node is Ready
#   cluster.sh down STATE                      stop it and undo what up did
#
# BIN_DIR holds kube-apiserver, kube-controller-manager, kube-scheduler,
# kubelet, kube-proxy, kubectl and coredns (scripts/k8s-tools.sh); etcd,
# containerd, runc and the CNI plugins are Debian's. `up` writes
# STATE/kubeconfig (cluster admin). Every address is local: the node's is
# NODE_IP, added to the loopback interface, pods get 10.244.0.0/24 on a
# bridge, Services 10.96.0.0/16; ports are picked free.
#
# `down` is idempotent and safe after a failed `up`: it deletes the pods
# through Kubernetes while it still runs (so CNI releases their network),
# then stops every process it started (by the pids it recorded, each
# checked to still be ours), the containerd shims and container processes
# of our socket, unmounts everything under STATE and /run/containerd,
# removes /run/containerd, the pods' network namespaces, the bridge and
# the node address, the iptables chains of kube-proxy, kubelet and CNI,
# and puts back the sysctls and the root mount propagation it changed.
set -euo pipefail
here=$(cd "$(dirname "$0")" && pwd)
root=$(cd "$here/../.." && pwd)

NODE_IP=10.255.254.1
NODE_NAME=pdpm-e2e-node
BRIDGE_IF=pdpm-e2e-br0
POD_CIDR=10.244.0.0/24
SERVICE_CIDR=10.96.0.0/16
API_SERVICE_IP=10.96.0.1
CNI_NETWORK=pdpm-e2e
# Pre-created volumes of the default StorageClass (claims are never
# deleted and reused here: a retained volume stays taken).
LOCAL_VOLUMES=8

log() { echo "cluster: $*" >&2; }
die() {
  log "$*"
  exit 1
}

free_port() { "$root/scripts/free-ports"; }

# Starts a daemon in its own session, logging to STATE/logs/NAME.log.
start() { # name command...
  local name=$1
  shift
  setsid "$@" >>"$state/logs/$name.log" 2>&1 </dev/null &
  echo $! >"$state/pids/$name"
}

# True while the pid in STATE/pids/NAME is alive and its command line
# still names STATE (a reused pid is never ours).
ours() { # name
  local f=$state/pids/$1 pid
  [[ -f $f ]] || return 1
  pid=$(cat "$f")
  [[ -r /proc/$pid/cmdline ]] && tr '\0' ' ' <"/proc/$pid/cmdline" | grep -qF "$state"
}

stop() { # name
  local name=$1 pid i
  if ours "$name"; then
    pid=$(cat "$state/pids/$name")
    kill -TERM "$pid" 2>/dev/null || true
    for ((i = 0; i < 100; i++)); do
      ours "$name" || break
      sleep 0.1
    done
    if ours "$name"; then
      log "$name ($pid) ignored SIGTERM for 10 s: SIGKILL"
      kill -KILL "$pid" 2>/dev/null || true
    fi
  fi
  rm -f "$state/pids/$name"
}

# Waits up to SECONDS for COMMAND to succeed.
wait_for() { # seconds what command...
  local seconds=$1 what=$2 i
  shift 2
  for ((i = 0; i < seconds * 5; i++)); do
    if "$@" >/dev/null 2>&1; then return 0; fi
    sleep 0.2
  done
  die "$what not ready after $seconds s (logs in $state/logs)"
}

kubectl_() { "$bin/kubectl" --kubeconfig "$state/kubeconfig" "$@"; }

# ---------------------------------------------------------------- certificates
pki() {
  local p=$state/pki
  mkdir -p "$p"
  openssl req -x509 -newkey rsa:2048 -nodes -days 2 -subj "/CN=pdpm-e2e-ca" \
    -keyout "$p/ca.key" -out "$p/ca.crt" 2>/dev/null
  openssl genrsa -out "$p/sa.key" 2048 2>/dev/null
  openssl rsa -in "$p/sa.key" -pubout -out "$p/sa.pub" 2>/dev/null
  cert() { # name subject [subjectAltName]
    openssl req -newkey rsa:2048 -nodes -subj "$2" -keyout "$p/$1.key" -out "$p/$1.csr" 2>/dev/null
    local ext=$p/$1.ext
    echo "extendedKeyUsage=${3:+serverAuth,}clientAuth" >"$ext"
    [[ -z ${3:-} ]] || echo "subjectAltName=$3" >>"$ext"
    openssl x509 -req -in "$p/$1.csr" -CA "$p/ca.crt" -CAkey "$p/ca.key" -CAcreateserial \
      -days 2 -extfile "$ext" -out "$p/$1.crt" 2>/dev/null
  }
  cert apiserver "/CN=kube-apiserver" \
    "IP:$NODE_IP,IP:$API_SERVICE_IP,IP:127.0.0.1,DNS:kubernetes,DNS:kubernetes.default,DNS:kubernetes.default.svc,DNS:kubernetes.default.svc.cluster.local"
  cert apiserver-kubelet-client "/O=system:masters/CN=kube-apiserver-kubelet-client"
  cert admin "/O=system:masters/CN=pdpm-e2e-admin"
  cert controller-manager "/CN=system:kube-controller-manager"
  cert scheduler "/CN=system:kube-scheduler"
  cert kubelet "/O=system:nodes/CN=system:node:$NODE_NAME"
  cert kube-proxy "/CN=system:kube-proxy"
  cert coredns "/O=system:masters/CN=pdpm-e2e-coredns"
  kubeconfig() { # file cert
    cat >"$state/$1" <<EOF
apiVersion: v1
kind: Config
clusters:
- name: e2e
  cluster: {server: "https://$NODE_IP:$api_port", certificate-authority: "$p/ca.crt"}
users:
- name: $2
  user: {client-certificate: "$p/$2.crt", client-key: "$p/$2.key"}
contexts:
- name: e2e
  context: {cluster: e2e, user: $2}
current-context: e2e
EOF
  }
  kubeconfig kubeconfig admin
  for c in controller-manager scheduler kubelet kube-proxy coredns; do kubeconfig "$c.kubeconfig" "$c"; done
}

# ---------------------------------------------------------------- up
up() {
  [[ $(id -u) -eq 0 ]] || die "must run as root"
  for b in kube-apiserver kube-controller-manager kube-scheduler kubelet kube-proxy kubectl coredns; do
    [[ -x $bin/$b ]] || die "$bin/$b missing (scripts/k8s-tools.sh)"
  done
  for b in etcd containerd containerd-shim-runc-v2 runc ctr iptables; do
    command -v "$b" >/dev/null || die "$b missing (scripts/deps.sh e2e)"
  done
  [[ ! -e /run/containerd ]] || die "/run/containerd exists: another containerd runs here"
  ! ip -4 addr show dev lo | grep -qF " $NODE_IP/" || die "$NODE_IP is on lo: another e2e cluster runs here"
  if [[ -n $(ls -A "$state") && ! -d $state/logs ]]; then
    die "$state is not empty and not an e2e cluster's directory"
  fi
  rm -rf "$state"
  # PM files an interrupted run left on this node under the operator's
  # default emulated hostPath (namespace pdpm-e2e): a fresh cluster's
  # monitor refuses servers whose PM belongs to another cluster.
  rm -rf /var/lib/pdpm/pdpm-e2e-*
  mkdir -p "$state"/{logs,pids,saved}
  echo "$bin" >"$state/bin"
  # What down puts back.
  findmnt -no PROPAGATION / >"$state/saved/propagation"
  sysctl -n net.ipv4.ip_forward >"$state/saved/ip_forward"
  ls /var/run/netns 2>/dev/null >"$state/saved/netns" || true

  # The node's address, on loopback: local to this machine only.
  ip addr add "$NODE_IP/32" dev lo

  local etcd_port etcd_peer
  etcd_port=$(free_port)
  etcd_peer=$(free_port)
  api_port=$(free_port)
  pki

  start etcd etcd --name e2e --data-dir "$state/etcd" \
    --listen-client-urls "http://127.0.0.1:$etcd_port" --advertise-client-urls "http://127.0.0.1:$etcd_port" \
    --listen-peer-urls "http://127.0.0.1:$etcd_peer" --initial-advertise-peer-urls "http://127.0.0.1:$etcd_peer" \
    --initial-cluster "e2e=http://127.0.0.1:$etcd_peer" --listen-metrics-urls "" \
    --quota-backend-bytes 2147483648
  local p=$state/pki
  start kube-apiserver "$bin/kube-apiserver" --etcd-servers "http://127.0.0.1:$etcd_port" \
    --bind-address "$NODE_IP" --secure-port "$api_port" --advertise-address "$NODE_IP" \
    --service-cluster-ip-range "$SERVICE_CIDR" --allow-privileged=true \
    --authorization-mode Node,RBAC --enable-admission-plugins NodeRestriction \
    --client-ca-file "$p/ca.crt" --tls-cert-file "$p/apiserver.crt" --tls-private-key-file "$p/apiserver.key" \
    --kubelet-client-certificate "$p/apiserver-kubelet-client.crt" \
    --kubelet-client-key "$p/apiserver-kubelet-client.key" \
    --kubelet-preferred-address-types InternalIP \
    --service-account-issuer https://kubernetes.default.svc.cluster.local \
    --service-account-key-file "$p/sa.pub" --service-account-signing-key-file "$p/sa.key" \
    --profiling=false --v=1
  wait_for 90 kube-apiserver kubectl_ get --raw /readyz

  start kube-controller-manager "$bin/kube-controller-manager" \
    --kubeconfig "$state/controller-manager.kubeconfig" \
    --authentication-kubeconfig "$state/controller-manager.kubeconfig" \
    --authorization-kubeconfig "$state/controller-manager.kubeconfig" \
    --bind-address 127.0.0.1 --secure-port "$(free_port)" --leader-elect=false \
    --service-account-private-key-file "$p/sa.key" --root-ca-file "$p/ca.crt" \
    --use-service-account-credentials --cluster-name pdpm-e2e --v=1
  start kube-scheduler "$bin/kube-scheduler" --kubeconfig "$state/scheduler.kubeconfig" \
    --authentication-kubeconfig "$state/scheduler.kubeconfig" \
    --authorization-kubeconfig "$state/scheduler.kubeconfig" \
    --bind-address 127.0.0.1 --secure-port "$(free_port)" --leader-elect=false --v=1

  # kubelet's volume mounts must reach the containers' mount namespaces.
  mount --make-rshared /

  mkdir -p "$state/containerd" "$state/cni"
  cat >"$state/containerd/config.toml" <<EOF
version = 2
root = "$state/containerd/root"
state = "$state/containerd/state"
[grpc]
  address = "$state/containerd/containerd.sock"
[ttrpc]
  address = "$state/containerd/containerd.sock.ttrpc"
[plugins."io.containerd.internal.v1.opt"]
  path = "$state/containerd/opt"
[plugins."io.containerd.grpc.v1.cri"]
  sandbox_image = "docker.io/pdpm-e2e/pause:$version"
  # root here lacks CAP_SYS_RESOURCE: no negative oom_score_adj.
  restrict_oom_score_adj = true
  disable_apparmor = true
  stream_server_address = "127.0.0.1"
  stream_server_port = "0"
  [plugins."io.containerd.grpc.v1.cri".containerd]
    snapshotter = "overlayfs"
    default_runtime_name = "runc"
    [plugins."io.containerd.grpc.v1.cri".containerd.runtimes.runc]
      runtime_type = "io.containerd.runc.v2"
      [plugins."io.containerd.grpc.v1.cri".containerd.runtimes.runc.options]
        SystemdCgroup = false
  [plugins."io.containerd.grpc.v1.cri".cni]
    bin_dir = "/usr/lib/cni"
    conf_dir = "$state/cni"
EOF
  cat >"$state/cni/10-$CNI_NETWORK.conflist" <<EOF
{
  "cniVersion": "1.0.0",
  "name": "$CNI_NETWORK",
  "plugins": [
    {"type": "bridge", "bridge": "$BRIDGE_IF", "isGateway": true, "ipMasq": true, "hairpinMode": true,
     "ipam": {"type": "host-local", "dataDir": "$state/cni-ipam", "ranges": [[{"subnet": "$POD_CIDR"}]],
              "routes": [{"dst": "0.0.0.0/0"}]}}
  ]
}
EOF
  start containerd containerd --config "$state/containerd/config.toml"
  local ctr=(ctr --address "$state/containerd/containerd.sock" -n k8s.io)
  wait_for 30 containerd "${ctr[@]}" version
  local t
  for t in "${image_tars[@]}"; do
    "${ctr[@]}" images import "$t" >/dev/null ||
      die "importing $t failed"
  done
  "${ctr[@]}" images ls -q | grep -v '^sha256:' | sed 's/^/cluster: image /' >&2

  local kubelet_port healthz_port
  kubelet_port=$(free_port)
  healthz_port=$(free_port)
  mkdir -p "$state/kubelet"
  cat >"$state/kubelet/config.yaml" <<EOF
apiVersion: kubelet.config.k8s.io/v1beta1
kind: KubeletConfiguration
address: "$NODE_IP"
port: $kubelet_port
readOnlyPort: 0
healthzBindAddress: 127.0.0.1
healthzPort: $healthz_port
containerRuntimeEndpoint: "unix://$state/containerd/containerd.sock"
authentication:
  anonymous: {enabled: false}
  webhook: {enabled: true}
  x509: {clientCAFile: "$p/ca.crt"}
authorization: {mode: Webhook}
cgroupDriver: cgroupfs
failCgroupV1: false
failSwapOn: false
clusterDNS: ["$NODE_IP"]
clusterDomain: cluster.local
resolvConf: /etc/resolv.conf
podLogsDir: "$state/logs/pods"
# Imported images are never pulled again: never collect them.
imageGCHighThresholdPercent: 100
imageGCLowThresholdPercent: 99
evictionHard: {memory.available: "100Mi", nodefs.available: "1%", imagefs.available: "1%"}
serializeImagePulls: false
EOF
  start kubelet "$bin/kubelet" --config "$state/kubelet/config.yaml" \
    --kubeconfig "$state/kubelet.kubeconfig" --root-dir "$state/kubelet" \
    --cert-dir "$state/kubelet/pki" --hostname-override "$NODE_NAME" --node-ip "$NODE_IP" --v=1

  cat >"$state/kube-proxy.yaml" <<EOF
apiVersion: kubeproxy.config.k8s.io/v1alpha1
kind: KubeProxyConfiguration
mode: iptables
clientConnection: {kubeconfig: "$state/kube-proxy.kubeconfig"}
hostnameOverride: "$NODE_NAME"
bindAddress: "$NODE_IP"
clusterCIDR: "$POD_CIDR"
healthzBindAddress: "127.0.0.1:$(free_port)"
metricsBindAddress: "127.0.0.1:$(free_port)"
# Leave the host's conntrack table and localhost routing as they are.
conntrack: {maxPerCore: 0, min: 0, tcpEstablishedTimeout: 0s, tcpCloseWaitTimeout: 0s}
iptables: {localhostNodePorts: false}
EOF
  start kube-proxy "$bin/kube-proxy" --config "$state/kube-proxy.yaml" --v=1

  cat >"$state/Corefile" <<EOF
.:53 {
  bind $NODE_IP
  errors
  kubernetes cluster.local in-addr.arpa ip6.arpa {
    kubeconfig $state/coredns.kubeconfig e2e
    pods insecure
  }
  cache 5
}
EOF
  start coredns "$bin/coredns" -conf "$state/Corefile"

  wait_for 120 "node $NODE_NAME" kubectl_ wait --for=condition=Ready "node/$NODE_NAME" --timeout=1s
  wait_for 60 "the default ServiceAccount" kubectl_ get serviceaccount default
  local_storage
  log "up: kubeconfig $state/kubeconfig"
}

# The default StorageClass: host directories under STATE/pv as
# pre-created volumes (no provisioner runs here), owned by the images'
# unprivileged user, since host-path volumes ignore fsGroup.
local_storage() {
  local i manifest
  manifest="apiVersion: storage.k8s.io/v1
kind: StorageClass
metadata:
  name: e2e-local
  annotations: {storageclass.kubernetes.io/is-default-class: \"true\"}
provisioner: kubernetes.io/no-provisioner
volumeBindingMode: WaitForFirstConsumer
reclaimPolicy: Retain"
  for ((i = 1; i <= LOCAL_VOLUMES; i++)); do
    mkdir -p "$state/pv/$i"
    chown 65532:65532 "$state/pv/$i"
    chmod 0700 "$state/pv/$i"
    manifest+="
---
apiVersion: v1
kind: PersistentVolume
metadata: {name: e2e-local-$i}
spec:
  capacity: {storage: 2Gi}
  accessModes: [ReadWriteOnce]
  persistentVolumeReclaimPolicy: Retain
  storageClassName: e2e-local
  hostPath: {path: \"$state/pv/$i\", type: Directory}"
  done
  kubectl_ apply -f - <<<"$manifest" >/dev/null
}

# ---------------------------------------------------------------- down
down() {
  [[ -d $state ]] || return 0
  # Let Kubernetes stop the pods while it runs, so CNI releases their
  # addresses and rules: no controller recreates them once it is stopped.
  stop kube-controller-manager
  if ours kube-apiserver && ours kubelet; then
    kubectl_ delete pods --all --all-namespaces --grace-period=0 --force --wait=false \
      >/dev/null 2>&1 || true
    local i
    for ((i = 0; i < 150; i++)); do
      [[ -z $(ctr --address "$state/containerd/containerd.sock" -n k8s.io tasks ls -q 2>/dev/null) ]] && break
      sleep 0.2
    done
  fi
  for d in kubelet kube-proxy coredns kube-scheduler; do stop "$d"; done
  # kube-proxy removes its own rules.
  if [[ -x ${bin:-}/kube-proxy ]]; then "$bin/kube-proxy" --cleanup >/dev/null 2>&1 || true; fi
  stop containerd
  # Shims outlive containerd by design: those of our socket, then whatever
  # still runs in the pods' cgroups.
  local pid
  for pid in $(pgrep -f containerd-shim-runc-v2 || true); do
    if tr '\0' ' ' <"/proc/$pid/cmdline" 2>/dev/null | grep -qF "$state/containerd/"; then
      kill -KILL "$pid" 2>/dev/null || true
    fi
  done
  local cg
  for cg in /sys/fs/cgroup/*/kubepods /sys/fs/cgroup/unified/kubepods; do
    [[ -d $cg ]] || continue
    # shellcheck disable=SC2038 # cgroup.procs holds pids, one a line
    find "$cg" -name cgroup.procs -exec cat {} + 2>/dev/null | xargs -r kill -KILL 2>/dev/null || true
  done
  sleep 0.5
  for cg in /sys/fs/cgroup/*/kubepods /sys/fs/cgroup/unified/kubepods; do
    [[ -d $cg ]] || continue
    find "$cg" -depth -type d -exec rmdir {} \; 2>/dev/null || true
  done
  for d in kube-apiserver etcd; do stop "$d"; done

  # Mounts: pods' volumes and containers' root file systems.
  local m
  for m in $(findmnt -rn -o TARGET | grep -E "^($state|/run/containerd|/var/run/netns/cni-)" | sort -r); do
    umount -l "$m" 2>/dev/null || true
  done
  rm -rf /run/containerd
  # Network namespaces the pods left (CNI names them cni-...).
  local ns
  for ns in /var/run/netns/cni-*; do
    [[ -e $ns ]] || continue
    ns=${ns##*/}
    grep -qx "$ns" "$state/saved/netns" 2>/dev/null || ip netns delete "$ns" 2>/dev/null || true
  done
  ip link delete "$BRIDGE_IF" 2>/dev/null || true
  ip addr del "$NODE_IP/32" dev lo 2>/dev/null || true
  cleanup_iptables iptables
  cleanup_iptables ip6tables
  if [[ -f $state/saved/ip_forward ]]; then sysctl -qw net.ipv4.ip_forward="$(cat "$state/saved/ip_forward")"; fi
  if [[ $(cat "$state/saved/propagation" 2>/dev/null) == private ]]; then mount --make-rprivate /; fi
  # Keep the logs for a failed run's report; the rest goes.
  find "$state" -mindepth 1 -maxdepth 1 -not -name logs -exec rm -rf {} +
  log "down: nothing left running (logs in $state/logs)"
}

# Deletes the rules that jump to chains of kube-proxy, kubelet (KUBE-*) and
# CNI (CNI-*), and then those chains, in every table.
cleanup_iptables() { # iptables|ip6tables
  local ipt=$1 table rule chain
  command -v "$ipt" >/dev/null || return 0
  for table in filter nat mangle; do
    "$ipt" -t "$table" -S 2>/dev/null | { grep -E '^-A [A-Z]+ .*-j (KUBE|CNI)-' || true; } |
      { grep -vE '^-A (KUBE|CNI)-' || true; } | while read -r rule; do
      # shellcheck disable=SC2086 # the rule's own words
      "$ipt" -t "$table" ${rule/-A /-D } 2>/dev/null || true
    done
    for chain in $("$ipt" -t "$table" -S 2>/dev/null | sed -n 's/^-N \(\(KUBE\|CNI\)-[^ ]*\)$/\1/p'); do
      "$ipt" -t "$table" -F "$chain" 2>/dev/null || true
    done
    for chain in $("$ipt" -t "$table" -S 2>/dev/null | sed -n 's/^-N \(\(KUBE\|CNI\)-[^ ]*\)$/\1/p'); do
      "$ipt" -t "$table" -X "$chain" 2>/dev/null || true
    done
  done
}

cmd=${1:-}
state=${2:-}
[[ -n $cmd && -n $state ]] || die "usage: cluster.sh up STATE BIN_DIR IMAGE_TAR... | down STATE"
state=$(mkdir -p "$state" && cd "$state" && pwd)
version=$(cat "$root/VERSION")
case $cmd in
up)
  bin=${3:?BIN_DIR}
  shift 3
  image_tars=("$@")
  up
  ;;
down)
  bin=$(cat "$state/bin" 2>/dev/null || true)
  down
  ;;
*) die "unknown command $cmd (up or down)" ;;
esac
