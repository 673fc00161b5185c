package controller

import (
	"context"
	"fmt"
	"net"
	"os"
	"strings"
	"sync"
	"testing"
	"time"

	"go.uber.org/zap/zapcore"
	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
	"google.golang.org/protobuf/proto"
	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/api/meta"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/types"
	clientgoscheme "k8s.io/client-go/kubernetes/scheme"
	"k8s.io/client-go/rest"
	ctrl "sigs.k8s.io/controller-runtime"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/log/zap"
	metricsserver "sigs.k8s.io/controller-runtime/pkg/metrics/server"

	pdpmv1alpha1 "pdpm.io/pdpm/operator/api/v1alpha1"
	"pdpm.io/pdpm/operator/internal/pdpmv1"
	"pdpm.io/pdpm/operator/internal/testenv"
)

// The whole suite shares one real kube-apiserver + etcd (envtest) and one
// running operator; each test works in its own namespace.
var (
	k8s client.Client
	// testConfig reaches the API server as its administrator.
	testConfig *rest.Config
	scheme     = runtime.NewScheme()
	// monitors maps a namespace to the address of the test's monitor gRPC
	// server; namespaces without one get an address nothing listens on.
	monitors sync.Map
)

const (
	unreachableMonitor = "127.0.0.1:1"
	testOperatorImage  = "pdpm/operator:test"
)

func TestMain(m *testing.M) {
	os.Exit(runSuite(m))
}

func runSuite(m *testing.M) int {
	env, err := testenv.Environment()
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		return 1
	}
	ctrl.SetLogger(zap.New(zap.WriteTo(os.Stderr), zap.Level(zapLevel())))
	if err := clientgoscheme.AddToScheme(scheme); err != nil {
		panic(err)
	}
	if err := pdpmv1alpha1.AddToScheme(scheme); err != nil {
		panic(err)
	}
	cfg, err := env.Start()
	if err != nil {
		fmt.Fprintln(os.Stderr, "starting envtest:", err)
		return 1
	}
	defer func() {
		if err := env.Stop(); err != nil {
			fmt.Fprintln(os.Stderr, "stopping envtest:", err)
		}
	}()
	testConfig = cfg
	k8s, err = client.New(cfg, client.Options{Scheme: scheme})
	if err != nil {
		panic(err)
	}
	mgr, err := ctrl.NewManager(cfg, ctrl.Options{
		Scheme:                 scheme,
		Metrics:                metricsserver.Options{BindAddress: "0"},
		HealthProbeBindAddress: "0",
		Cache:                  CacheOptions(),
	})
	if err != nil {
		panic(err)
	}
	r := &PDPMClusterReconciler{
		Client:        mgr.GetClient(),
		APIReader:     mgr.GetAPIReader(),
		Scheme:        mgr.GetScheme(),
		Recorder:      mgr.GetEventRecorderFor("pdpm-operator"),
		MonitorStatus: GetClusterStatus,
		MonitorDrain:  DrainServer,
		MonitorAddress: func(c *pdpmv1alpha1.PDPMCluster) string {
			if a, ok := monitors.Load(c.Namespace); ok {
				return a.(string)
			}
			return unreachableMonitor
		},
		MonitorTimeout: 2 * time.Second,
		ResyncPeriod:   500 * time.Millisecond,
		OperatorImage:  testOperatorImage,
	}
	if err := r.SetupWithManager(mgr); err != nil {
		panic(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- mgr.Start(ctx) }()
	code := m.Run()
	cancel()
	if err := <-done; err != nil {
		fmt.Fprintln(os.Stderr, "manager:", err)
		code = 1
	}
	return code
}

func zapLevel() zapcore.Level {
	if os.Getenv("OPERATOR_TEST_VERBOSE") != "" {
		return -1
	}
	return 2 // errors only
}

// testMonitor is a real gRPC server implementing pdpm.v1.Monitor's status
// and drain API: it serves the cluster status the test sets, and a drain
// request with the secret the test sets marks the server DRAINING (the
// test decides when it is DRAINED).
type testMonitor struct {
	pdpmv1.UnimplementedMonitorServer
	mu     sync.Mutex
	status *pdpmv1.ClusterStatus
	secret string
	drains []uint32 // server ids of the drain requests, in order
	server *grpc.Server
	ns     string
}

func (m *testMonitor) DrainServer(_ context.Context, req *pdpmv1.DrainServerRequest) (*pdpmv1.DrainServerResponse, error) {
	m.mu.Lock()
	defer m.mu.Unlock()
	if m.secret == "" || req.GetClusterSecret() != m.secret {
		return nil, status.Error(codes.PermissionDenied, "wrong cluster secret")
	}
	for _, s := range m.status.Servers {
		if s.GetId() != req.GetServerId() {
			continue
		}
		m.drains = append(m.drains, s.GetId())
		if s.State != pdpmv1.ServerState_SERVER_STATE_DRAINED {
			s.State = pdpmv1.ServerState_SERVER_STATE_DRAINING
		}
		resp := &pdpmv1.DrainServerResponse{Epoch: m.status.Epoch, State: s.State}
		if s.State != pdpmv1.ServerState_SERVER_STATE_DRAINED {
			resp.Message = "2 primaries, 1 backups and 3 tables still to move"
		}
		return resp, nil
	}
	return nil, status.Errorf(codes.NotFound, "server %d is not a member", req.GetServerId())
}

// drainRequests returns the server ids the operator asked to drain.
func (m *testMonitor) drainRequests() []uint32 {
	m.mu.Lock()
	defer m.mu.Unlock()
	return append([]uint32(nil), m.drains...)
}

func (m *testMonitor) GetClusterStatus(context.Context, *pdpmv1.GetClusterStatusRequest) (*pdpmv1.ClusterStatus, error) {
	m.mu.Lock()
	defer m.mu.Unlock()
	return proto.Clone(m.status).(*pdpmv1.ClusterStatus), nil
}

func (m *testMonitor) set(f func(*pdpmv1.ClusterStatus)) {
	m.mu.Lock()
	defer m.mu.Unlock()
	f(m.status)
}

// stop makes the monitor unreachable.
func (m *testMonitor) stop() {
	m.server.Stop()
	monitors.Store(m.ns, unreachableMonitor)
}

// startMonitor serves a healthy cluster status for namespace ns.
func startMonitor(t *testing.T, ns string, servers int) *testMonitor {
	t.Helper()
	lis, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	st := &pdpmv1.ClusterStatus{
		ClusterUuid: "3f6c1d9e-0000-4000-8000-00000000c1a5", Epoch: 7, Health: pdpmv1.Health_HEALTH_OK,
		ServersUp: uint32(servers), ServersTotal: uint32(servers),
		CapacityBytes: uint64(servers) << 30, UsedBytes: 256 << 20, Leader: "pdpm-monitor-0:7400", ReplicaCount: 2,
	}
	for i := 0; i < servers; i++ {
		st.Servers = append(st.Servers, &pdpmv1.ServerInfo{
			Id: uint32(i + 1), State: pdpmv1.ServerState_SERVER_STATE_UP,
			Labels: map[string]string{ServerPodLabel: fmt.Sprintf("pdpm-server-%d", i)},
		})
	}
	m := &testMonitor{status: st, server: grpc.NewServer(), ns: ns}
	pdpmv1.RegisterMonitorServer(m.server, m)
	go func() { _ = m.server.Serve(lis) }()
	monitors.Store(ns, lis.Addr().String())
	t.Cleanup(m.stop)
	return m
}

// newNamespace creates a namespace for one test.
func newNamespace(t *testing.T) string {
	t.Helper()
	name := strings.ToLower(strings.ReplaceAll(t.Name(), "/", "-"))
	name = strings.ReplaceAll(name, "_", "-")
	if len(name) > 50 {
		name = name[:50]
	}
	ns := &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{GenerateName: strings.TrimSuffix(name, "-") + "-"}}
	if err := k8s.Create(context.Background(), ns); err != nil {
		t.Fatal(err)
	}
	// The ServiceAccount admission needs it for the pods tests create; no
	// controller makes it under envtest.
	sa := &corev1.ServiceAccount{ObjectMeta: metav1.ObjectMeta{Name: "default", Namespace: ns.Name}}
	if err := k8s.Create(context.Background(), sa); err != nil {
		t.Fatal(err)
	}
	return ns.Name
}

// testCluster is a valid cluster named "pdpm": 3 servers with emulated PM
// over TCP, small segments.
func testCluster(ns string, mutate ...func(*pdpmv1alpha1.PDPMCluster)) *pdpmv1alpha1.PDPMCluster {
	c := &pdpmv1alpha1.PDPMCluster{
		ObjectMeta: metav1.ObjectMeta{Name: "pdpm", Namespace: ns},
		Spec: pdpmv1alpha1.PDPMClusterSpec{
			Servers: pdpmv1alpha1.ServersSpec{
				Replicas: 3,
				PM: pdpmv1alpha1.PMSource{Mode: pdpmv1alpha1.PMEmulated,
					Emulated: &pdpmv1alpha1.EmulatedSource{Size: resource.MustParse("64Mi")}},
			},
			Storage: pdpmv1alpha1.StorageSpec{SegmentSize: resource.MustParse("8Mi")},
			Images:  pdpmv1alpha1.ImagesSpec{Tag: "0.1.0"},
		},
	}
	for _, f := range mutate {
		f(c)
	}
	return c
}

// createCluster creates c and deletes it when the test ends.
func createCluster(t *testing.T, c *pdpmv1alpha1.PDPMCluster) {
	t.Helper()
	if err := k8s.Create(context.Background(), c); err != nil {
		t.Fatalf("creating the cluster: %v", err)
	}
	t.Cleanup(func() { deleteCluster(t, c) })
}

func deleteCluster(t *testing.T, c *pdpmv1alpha1.PDPMCluster) {
	t.Helper()
	if err := k8s.Delete(context.Background(), c); err != nil && !apierrors.IsNotFound(err) {
		t.Errorf("deleting the cluster: %v", err)
		return
	}
	eventually(t, func() error {
		err := k8s.Get(context.Background(), client.ObjectKeyFromObject(c), &pdpmv1alpha1.PDPMCluster{})
		if apierrors.IsNotFound(err) {
			return nil
		}
		return fmt.Errorf("cluster %s/%s still exists (%v)", c.Namespace, c.Name, err)
	})
}

// eventually retries f until it succeeds or 30 s pass.
func eventually(t *testing.T, f func() error) {
	t.Helper()
	testenv.Eventually(t, f)
}

func get(t *testing.T, ns, name string, obj client.Object) error {
	t.Helper()
	return k8s.Get(context.Background(), types.NamespacedName{Namespace: ns, Name: name}, obj)
}

func mustGet(t *testing.T, ns, name string, obj client.Object) {
	t.Helper()
	eventually(t, func() error { return get(t, ns, name, obj) })
}

func getCluster(t *testing.T, c *pdpmv1alpha1.PDPMCluster) *pdpmv1alpha1.PDPMCluster {
	t.Helper()
	out := &pdpmv1alpha1.PDPMCluster{}
	if err := k8s.Get(context.Background(), client.ObjectKeyFromObject(c), out); err != nil {
		t.Fatal(err)
	}
	return out
}

// updateCluster applies f to the latest version of c, retrying conflicts.
func updateCluster(t *testing.T, c *pdpmv1alpha1.PDPMCluster, f func(*pdpmv1alpha1.PDPMCluster)) error {
	t.Helper()
	for {
		cur := getCluster(t, c)
		f(cur)
		err := k8s.Update(context.Background(), cur)
		if !apierrors.IsConflict(err) {
			return err
		}
	}
}

// waitCondition waits until the cluster's condition has the status and
// reason given and returns the cluster.
func waitCondition(t *testing.T, c *pdpmv1alpha1.PDPMCluster, typ string, status metav1.ConditionStatus, reason string) *pdpmv1alpha1.PDPMCluster {
	t.Helper()
	var cur *pdpmv1alpha1.PDPMCluster
	eventually(t, func() error {
		cur = getCluster(t, c)
		cond := meta.FindStatusCondition(cur.Status.Conditions, typ)
		if cond == nil {
			return fmt.Errorf("no %s condition", typ)
		}
		if cond.Status != status || cond.Reason != reason || cond.ObservedGeneration != cur.Generation {
			return fmt.Errorf("%s is %s/%s (%s) at generation %d, want %s/%s at %d",
				typ, cond.Status, cond.Reason, cond.Message, cond.ObservedGeneration, status, reason, cur.Generation)
		}
		return nil
	})
	return cur
}

// setStatefulSetStatus plays the StatefulSet controller (which envtest does
// not run): the StatefulSet observed its spec, has all pods, `updated` of
// them at the new revision and `ready` of them ready.
func setStatefulSetStatus(t *testing.T, ns, name string, ready, updated int32) {
	t.Helper()
	eventually(t, func() error {
		sts := &appsv1.StatefulSet{}
		if err := get(t, ns, name, sts); err != nil {
			return err
		}
		replicas := ptrValue(sts.Spec.Replicas)
		sts.Status.ObservedGeneration = sts.Generation
		sts.Status.Replicas = replicas
		sts.Status.AvailableReplicas = ready
		sts.Status.ReadyReplicas = ready
		sts.Status.CurrentReplicas = replicas
		sts.Status.UpdatedReplicas = updated
		sts.Status.UpdateRevision = fmt.Sprintf("%s-%s", name, sts.Annotations[TemplateHashAnnotation])
		sts.Status.CurrentRevision = sts.Status.UpdateRevision
		if updated < replicas {
			sts.Status.CurrentRevision = name + "-previous"
			sts.Status.CurrentReplicas = replicas - updated
		}
		return k8s.Status().Update(context.Background(), sts)
	})
}

// readyCluster plays the StatefulSet controller, scheduler and kubelet for
// cluster "pdpm": both StatefulSets fully ready, and a ready server pod per
// server, each on its own node.
func readyCluster(t *testing.T, c *pdpmv1alpha1.PDPMCluster, servers int32) {
	t.Helper()
	for i := 0; i < int(servers); i++ {
		serverPod(t, c, i, fmt.Sprintf("node-%d", i))
		setPodReady(t, c.Namespace, fmt.Sprintf("%s-%d", serverName(c), i), true)
	}
	setStatefulSetStatus(t, c.Namespace, "pdpm-monitor", 3, 3)
	setStatefulSetStatus(t, c.Namespace, "pdpm-server", servers, servers)
	setDeploymentReady(t, c.Namespace, "pdpm-gateway")
}

// setDeploymentReady plays the Deployment controller: every replica of the
// current spec updated and ready.
func setDeploymentReady(t *testing.T, ns, name string) {
	t.Helper()
	eventually(t, func() error {
		d := &appsv1.Deployment{}
		if err := get(t, ns, name, d); err != nil {
			return err
		}
		replicas := ptrValue(d.Spec.Replicas)
		d.Status = appsv1.DeploymentStatus{ObservedGeneration: d.Generation, Replicas: replicas,
			UpdatedReplicas: replicas, ReadyReplicas: replicas, AvailableReplicas: replicas}
		return k8s.Status().Update(context.Background(), d)
	})
}

// serverPod plays the scheduler for one server pod: created on node.
func serverPod(t *testing.T, c *pdpmv1alpha1.PDPMCluster, ordinal int, node string) *corev1.Pod {
	t.Helper()
	p := &corev1.Pod{
		ObjectMeta: metav1.ObjectMeta{Name: fmt.Sprintf("%s-%d", serverName(c), ordinal), Namespace: c.Namespace,
			Labels: Labels(c, componentServer)},
		Spec: corev1.PodSpec{NodeName: node, Containers: []corev1.Container{{Name: "pdpm-server", Image: "pdpm/core:0.1.0"}}},
	}
	if err := k8s.Create(context.Background(), p); err != nil {
		t.Fatal(err)
	}
	return p
}

// setPodReady plays the kubelet: the pod's Ready condition.
func setPodReady(t *testing.T, ns, name string, ready bool) {
	t.Helper()
	status := corev1.ConditionFalse
	if ready {
		status = corev1.ConditionTrue
	}
	eventually(t, func() error {
		p := &corev1.Pod{}
		if err := get(t, ns, name, p); err != nil {
			return err
		}
		p.Status.Phase = corev1.PodRunning
		p.Status.Conditions = []corev1.PodCondition{{Type: corev1.PodReady, Status: status, LastTransitionTime: metav1.Now()}}
		return k8s.Status().Update(context.Background(), p)
	})
}

// waitEvents waits until at least n events with the reason were recorded in
// namespace ns (the recorder writes them asynchronously).
func waitEvents(t *testing.T, ns, reason string, n int) {
	t.Helper()
	eventually(t, func() error {
		list := &corev1.EventList{}
		if err := k8s.List(context.Background(), list, client.InNamespace(ns)); err != nil {
			return err
		}
		got := 0
		for _, e := range list.Items {
			if e.Reason == reason {
				got += int(max(e.Count, 1))
			}
		}
		if got < n {
			return fmt.Errorf("%d %s events, want at least %d", got, reason, n)
		}
		return nil
	})
}
