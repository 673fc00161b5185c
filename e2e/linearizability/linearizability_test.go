package linearizability

import (
	"context"
	"fmt"
	"os"
	"path/filepath"
	"sync"
	"testing"
	"time"

	"github.com/anishathalye/porcupine"
)

// Run parameters: 6 clients on 4 keys for about 7.5 s, the victim killed
// and restarted 3 times. Each client issues at most clientRate operations
// a second, so that the history (at most about 90,000 operations) stays
// small enough for the checker to finish in seconds on any machine, and
// busy enough that every kill hits operations in flight.
const (
	numClients   = 6
	clientRate   = 2000
	kills        = 3
	upTime       = 1500 * time.Millisecond // traffic between restarts
	downTime     = 200 * time.Millisecond  // victim down: clients see refusals
	checkTimeout = 60 * time.Second
)

var testKeys = []string{"lin:a", "lin:b", "lin:c", "lin:d"}

// op builds a completed operation for hand-written histories.
func op(client int, in kvInput, call int64, out kvOutput, ret int64) porcupine.Operation {
	return porcupine.Operation{ClientId: client, Input: in, Call: call, Output: out, Return: ret}
}

// checkerRejectsBadHistories fails the test unless the model and checker
// reject histories that are not linearizable and accept one that is: a
// run with 0 violations means something only if violations are caught.
func checkerRejectsBadHistories(t *testing.T) {
	t.Helper()
	set := func(v int64) kvInput { return kvInput{Kind: opSet, Key: "x", Value: v} }
	get := kvInput{Kind: opGet, Key: "x"}
	incr := kvInput{Kind: opIncr, Key: "n"}
	bad := map[string][]porcupine.Operation{
		// A read after an acknowledged SET returns the older state.
		"stale read": {
			op(0, set(1), 0, kvOutput{}, 10),
			op(1, get, 20, kvOutput{Present: true, Value: 1}, 30),
			op(2, get, 40, kvOutput{}, 50),
		},
		// Two sequential INCRs of a new key both return 1: an update lost.
		"lost increment": {
			op(0, incr, 0, kvOutput{Value: 1}, 10),
			op(1, incr, 20, kvOutput{Value: 1}, 30),
		},
		// SET NX succeeds twice without a DEL in between.
		"double SET NX": {
			op(0, kvInput{Kind: opSetNX, Key: "x", Value: 1}, 0, kvOutput{Applied: true}, 10),
			op(1, kvInput{Kind: opSetNX, Key: "x", Value: 2}, 5, kvOutput{Applied: true}, 15),
		},
		// An unknown SET may take effect late, but not be undone once seen.
		"unknown write undone": {
			op(0, set(7), 0, kvOutput{Unknown: true}, never),
			op(1, get, 10, kvOutput{Present: true, Value: 7}, 20),
			op(1, get, 30, kvOutput{}, 40),
		},
	}
	for name, h := range bad {
		if porcupine.CheckOperations(kvModel, h) {
			t.Fatalf("checker accepted the non-linearizable history %q", name)
		}
	}
	good := []porcupine.Operation{
		op(0, set(7), 0, kvOutput{Unknown: true}, never),
		op(1, get, 10, kvOutput{}, 20),
		op(1, get, 30, kvOutput{Present: true, Value: 7}, 40),
		op(2, incr, 35, kvOutput{Value: 1}, 45),
		op(0, kvInput{Kind: opGetSet, Key: "n", Value: 5}, 50, kvOutput{Present: true, Value: 1}, 60),
		op(1, kvInput{Kind: opDel, Key: "x"}, 50, kvOutput{Applied: true}, 60),
		op(2, kvInput{Kind: opSetNX, Key: "x", Value: 3}, 55, kvOutput{Applied: true}, 65),
	}
	if !porcupine.CheckOperations(kvModel, good) {
		t.Fatal("checker rejected a linearizable history")
	}
}

func TestCheckerRejectsNonLinearizableHistories(t *testing.T) {
	checkerRejectsBadHistories(t)
}

// runWithKills drives numClients clients against target while victim is
// killed and restarted, and returns the recorded history.
func runWithKills(t *testing.T, target Target, victim int) []porcupine.Operation {
	t.Helper()
	ctx := context.Background()
	rec := newRecorder()
	stop := make(chan struct{})
	var wg sync.WaitGroup
	stats := make([]clientStats, numClients)
	errs := make([]error, numClients)
	addrs := target.Addrs()
	for i := 0; i < numClients; i++ {
		wg.Add(1)
		go func(i int) {
			defer wg.Done()
			protocol := 2 + i%2 // RESP2 and RESP3 clients
			stats[i], errs[i] = runClient(ctx, rec, i, addrs[i%len(addrs)], protocol, int64(i+1),
				testKeys, clientRate, stop)
		}(i)
	}
	name := target.Victims()[victim]
	var faultErr error
	for k := 0; k < kills && faultErr == nil; k++ {
		time.Sleep(upTime)
		if faultErr = target.Kill(victim); faultErr != nil {
			faultErr = fmt.Errorf("kill %s: %v", name, faultErr)
			break
		}
		time.Sleep(downTime)
		if faultErr = target.Restart(victim); faultErr != nil {
			faultErr = fmt.Errorf("restart %s: %v", name, faultErr)
		}
	}
	if faultErr == nil {
		time.Sleep(upTime)
	}
	close(stop)
	wg.Wait()
	if faultErr != nil {
		t.Fatal(faultErr)
	}
	var total clientStats
	for i, err := range errs {
		if err != nil {
			t.Fatal(err)
		}
		total.completed += stats[i].completed
		total.indeterminate += stats[i].indeterminate
		total.notSent += stats[i].notSent
	}
	t.Logf("%d clients, %d kills of %s: %d operations completed, %d indeterminate, %d not sent",
		numClients, kills, name, total.completed, total.indeterminate, total.notSent)
	if total.completed < 1000 {
		t.Fatalf("only %d operations completed: the run proves little", total.completed)
	}
	if total.indeterminate+total.notSent < kills {
		t.Fatalf("%d kills of %s failed only %d operations: the faults missed the traffic",
			kills, name, total.indeterminate+total.notSent)
	}
	// Once everything is up again, one last read of every key.
	final := newClient(addrs[0], 2)
	defer final.Close()
	for _, k := range testKeys {
		in := kvInput{Kind: opGet, Key: k}
		call := rec.now()
		out, err := issue(ctx, final, in)
		ret := rec.now()
		if kind, bad := classify(err); kind != completed || bad != nil {
			t.Fatalf("final GET %s: %v", k, err)
		}
		rec.add(numClients, in, call, out, ret)
	}
	return rec.history()
}

// checkHistory fails the test unless porcupine finds a linearization; on
// failure it writes a visualization next to the test's temporary files.
func checkHistory(t *testing.T, history []porcupine.Operation) {
	t.Helper()
	start := time.Now()
	result, info := porcupine.CheckOperationsVerbose(kvModel, history, checkTimeout)
	t.Logf("checked %d operations in %v: %v", len(history), time.Since(start).Round(time.Millisecond), result)
	switch result {
	case porcupine.Ok:
		return
	case porcupine.Unknown:
		t.Fatalf("checker did not finish within %v: linearizability not established", checkTimeout)
	default:
		path := filepath.Join(os.TempDir(), fmt.Sprintf("pdkvs-linearizability-%d.html", os.Getpid()))
		if err := porcupine.VisualizePath(kvModel, info, path); err == nil {
			t.Errorf("visualization of the violation: %s", path)
		}
		t.Fatal("history is not linearizable")
	}
}

// TestGatewayKillRestart: a pdkvs-gateway on a local PM store, killed with
// SIGKILL and restarted on the same PM mid-run.
func TestGatewayKillRestart(t *testing.T) {
	checkerRejectsBadHistories(t)
	binary := os.Getenv("PDKVS_GATEWAY")
	if binary == "" {
		t.Fatal("PDKVS_GATEWAY must name the pdkvs-gateway binary (make test-kv-linearizability sets it)")
	}
	pmDir := os.Getenv("PDPM_TEST_PM_DIR")
	if pmDir == "" {
		pmDir = "/dev/shm"
	}
	target, err := startGateway(binary, pmDir)
	if err != nil {
		t.Fatal(err)
	}
	defer target.Close()
	checkHistory(t, runWithKills(t, target, 0))
}
