package driver

import (
	"context"
	"log/slog"
	"net"
	"net/http"
	"sync"
	"time"

	"github.com/container-storage-interface/spec/lib/go/csi"
	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials/insecure"
	registerapi "k8s.io/kubelet/pkg/apis/pluginregistration/v1"
)

// Registration serves kubelet's plugin-registration API on a socket in
// kubelet's plugins_registry directory: what node-driver-registrar does,
// in the node plugin itself (that sidecar cannot be built here). Kubelet
// finds the socket, asks GetInfo, then connects to the CSI endpoint given
// there and reports the outcome with NotifyRegistrationStatus.
type Registration struct {
	registerapi.UnimplementedRegistrationServer
	// The CSI socket's path as kubelet sees it on the host.
	Endpoint string
	Log      *slog.Logger

	mu         sync.Mutex
	registered bool
	lastError  string
}

func (r *Registration) GetInfo(context.Context, *registerapi.InfoRequest) (*registerapi.PluginInfo, error) {
	return &registerapi.PluginInfo{Type: registerapi.CSIPlugin, Name: Name, Endpoint: r.Endpoint,
		SupportedVersions: []string{"1.0.0"}}, nil
}

func (r *Registration) NotifyRegistrationStatus(_ context.Context, s *registerapi.RegistrationStatus) (*registerapi.RegistrationStatusResponse, error) {
	r.mu.Lock()
	r.registered, r.lastError = s.GetPluginRegistered(), s.GetError()
	r.mu.Unlock()
	if s.GetPluginRegistered() {
		r.Log.Info("registered with kubelet")
	} else {
		r.Log.Error("kubelet refused the registration", "error", s.GetError())
	}
	return &registerapi.RegistrationStatusResponse{}, nil
}

// Registered tells whether kubelet last reported success, and its error
// otherwise.
func (r *Registration) Registered() (bool, string) {
	r.mu.Lock()
	defer r.mu.Unlock()
	return r.registered, r.lastError
}

// Serve serves the registration API on `l` until the returned server is
// stopped.
func (r *Registration) Serve(l net.Listener) *grpc.Server {
	s := grpc.NewServer()
	registerapi.RegisterRegistrationServer(s, r)
	go func() { _ = s.Serve(l) }()
	return s
}

// Healthz answers /healthz with 200 when the CSI endpoint answers Probe
// with ready (through the socket, as kubelet would reach it), else 503:
// what the livenessprobe sidecar does, in the plugin itself.
func Healthz(endpoint string, log *slog.Logger) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, req *http.Request) {
		network, address, err := ParseEndpoint(endpoint)
		if err == nil {
			err = probe(req.Context(), network, address)
		}
		if err != nil {
			log.Warn("health check failed", "error", err)
			http.Error(w, err.Error(), http.StatusServiceUnavailable)
			return
		}
		_, _ = w.Write([]byte("ok\n"))
	})
}

func probe(ctx context.Context, network, address string) error {
	ctx, cancel := context.WithTimeout(ctx, 5*time.Second)
	defer cancel()
	conn, err := grpc.NewClient("passthrough:///"+address, grpc.WithTransportCredentials(insecure.NewCredentials()),
		grpc.WithContextDialer(func(ctx context.Context, addr string) (net.Conn, error) {
			return (&net.Dialer{}).DialContext(ctx, network, addr)
		}))
	if err != nil {
		return err
	}
	defer conn.Close()
	resp, err := csi.NewIdentityClient(conn).Probe(ctx, &csi.ProbeRequest{})
	if err != nil {
		return err
	}
	if resp.GetReady() != nil && !resp.GetReady().GetValue() {
		return errNotReady
	}
	return nil
}

type notReady struct{}

func (notReady) Error() string { return "the driver says it is not ready" }

var errNotReady error = notReady{}
