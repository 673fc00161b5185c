package driver

import (
	"context"
	"io"
	"log/slog"
	"net"
	"net/http"
	"net/http/httptest"
	"path/filepath"
	"sync/atomic"
	"testing"

	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials/insecure"
	registerapi "k8s.io/kubelet/pkg/apis/pluginregistration/v1"
)

var quiet = slog.New(slog.NewTextHandler(io.Discard, nil))

// Kubelet's side of the registration, through a real socket.
func TestRegistrationAnswersKubelet(t *testing.T) {
	socket := filepath.Join(t.TempDir(), "reg.sock")
	l, err := net.Listen("unix", socket)
	if err != nil {
		t.Fatal(err)
	}
	r := &Registration{Endpoint: "/var/lib/kubelet/plugins/pdfs.csi.pdpm.io/csi.sock", Log: quiet}
	s := r.Serve(l)
	defer s.Stop()
	conn, err := grpc.NewClient("unix://"+socket, grpc.WithTransportCredentials(insecure.NewCredentials()))
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close()
	kubelet := registerapi.NewRegistrationClient(conn)
	info, err := kubelet.GetInfo(context.Background(), &registerapi.InfoRequest{})
	if err != nil {
		t.Fatal(err)
	}
	if info.GetType() != registerapi.CSIPlugin || info.GetName() != Name || info.GetEndpoint() != r.Endpoint ||
		len(info.GetSupportedVersions()) != 1 || info.GetSupportedVersions()[0] != "1.0.0" {
		t.Errorf("GetInfo = %v", info)
	}
	if ok, _ := r.Registered(); ok {
		t.Error("registered before kubelet said so")
	}
	if _, err := kubelet.NotifyRegistrationStatus(context.Background(), &registerapi.RegistrationStatus{
		PluginRegistered: false, Error: "version mismatch"}); err != nil {
		t.Fatal(err)
	}
	if ok, msg := r.Registered(); ok || msg != "version mismatch" {
		t.Errorf("after a refusal: %v %q", ok, msg)
	}
	if _, err := kubelet.NotifyRegistrationStatus(context.Background(), &registerapi.RegistrationStatus{
		PluginRegistered: true}); err != nil {
		t.Fatal(err)
	}
	if ok, _ := r.Registered(); !ok {
		t.Error("not registered after kubelet said so")
	}
}

// /healthz follows the CSI endpoint: 200 while it serves and is ready, 503
// when it says it is not ready or does not answer.
func TestHealthzProbesTheEndpoint(t *testing.T) {
	endpoint := "unix://" + filepath.Join(t.TempDir(), "csi.sock")
	var ready atomic.Bool
	ready.Store(true)
	srv := &Server{Identity: &Identity{Ready: func(context.Context) error {
		if !ready.Load() {
			return errNotReady
		}
		return nil
	}}, Log: quiet}
	l, err := Listen(endpoint)
	if err != nil {
		t.Fatal(err)
	}
	done := make(chan struct{})
	go func() { _ = srv.Serve(l); close(done) }()
	h := Healthz(endpoint, quiet)
	get := func() int {
		w := httptest.NewRecorder()
		h.ServeHTTP(w, httptest.NewRequest(http.MethodGet, "/healthz", nil))
		return w.Code
	}
	if code := get(); code != http.StatusOK {
		t.Errorf("serving and ready: %d", code)
	}
	ready.Store(false)
	if code := get(); code != http.StatusServiceUnavailable {
		t.Errorf("not ready: %d", code)
	}
	srv.Stop()
	<-done
	if code := get(); code != http.StatusServiceUnavailable {
		t.Errorf("stopped: %d", code)
	}
}
