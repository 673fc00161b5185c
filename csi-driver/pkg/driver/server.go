package driver

import (
	"context"
	"fmt"
	"log/slog"
	"net"
	"os"
	"path/filepath"
	"strings"

	"github.com/container-storage-interface/spec/lib/go/csi"
	"google.golang.org/grpc"
	"google.golang.org/grpc/status"
)

// Server serves the CSI services on a unix socket (or a TCP address for
// tests): identity always, the controller and node services when set.
type Server struct {
	Identity   *Identity
	Controller *Controller    // nil: no controller service
	Node       csi.NodeServer // *Node or *NodeForwarder; nil: no node service
	Log        *slog.Logger

	grpc *grpc.Server
}

// ParseEndpoint turns unix:///path, unix:/path or tcp://host:port into a
// network and address.
func ParseEndpoint(endpoint string) (network, address string, err error) {
	switch {
	case strings.HasPrefix(endpoint, "unix://"):
		return "unix", strings.TrimPrefix(endpoint, "unix://"), nil
	case strings.HasPrefix(endpoint, "unix:"):
		return "unix", strings.TrimPrefix(endpoint, "unix:"), nil
	case strings.HasPrefix(endpoint, "tcp://"):
		return "tcp", strings.TrimPrefix(endpoint, "tcp://"), nil
	}
	return "", "", fmt.Errorf("endpoint %q: want unix:///PATH or tcp://HOST:PORT", endpoint)
}

// Listen binds the endpoint (a unix socket's directory is created, a stale
// socket file of an earlier run replaced).
func Listen(endpoint string) (net.Listener, error) {
	network, address, err := ParseEndpoint(endpoint)
	if err != nil {
		return nil, err
	}
	if network == "unix" {
		// kubelet's plugins/<driver>/ does not exist before the first start.
		if err := os.MkdirAll(filepath.Dir(address), 0o750); err != nil {
			return nil, fmt.Errorf("create the socket's directory: %w", err)
		}
		if err := os.Remove(address); err != nil && !os.IsNotExist(err) {
			return nil, fmt.Errorf("remove the old socket: %w", err)
		}
	}
	return net.Listen(network, address)
}

// Serve serves on `l` until Stop.
func (s *Server) Serve(l net.Listener) error {
	s.grpc = grpc.NewServer(grpc.UnaryInterceptor(s.logCalls))
	csi.RegisterIdentityServer(s.grpc, s.Identity)
	if s.Controller != nil {
		csi.RegisterControllerServer(s.grpc, s.Controller)
	}
	if s.Node != nil {
		csi.RegisterNodeServer(s.grpc, s.Node)
	}
	return s.grpc.Serve(l)
}

// Stop ends Serve after the calls in flight.
func (s *Server) Stop() {
	if s.grpc != nil {
		s.grpc.GracefulStop()
	}
}

// logCalls logs every call that failed, and every call that changes
// something.
func (s *Server) logCalls(ctx context.Context, req any, info *grpc.UnaryServerInfo, handler grpc.UnaryHandler) (any, error) {
	resp, err := handler(ctx, req)
	method := info.FullMethod[strings.LastIndex(info.FullMethod, "/")+1:]
	if err != nil {
		s.Log.Warn("call failed", "method", method, "code", status.Code(err).String(), "error", status.Convert(err).Message())
	} else if !strings.HasPrefix(method, "Get") && !strings.HasPrefix(method, "List") && method != "Probe" &&
		!strings.HasSuffix(method, "Capabilities") && method != "NodeGetVolumeStats" {
		s.Log.Info("call done", "method", method)
	}
	return resp, err
}
