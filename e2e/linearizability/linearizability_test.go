package linearizability

import (
	"context"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/anishathalye/porcupine"
)

// Run parameters: 6 clients on 4 keys for several seconds, a victim killed
// and restarted 3 times. Each client issues at most clientRate operations
// a second, so that the history (at most about 90,000 operations) stays
// small enough for the checker to finish in seconds on any machine, and
// busy enough that every kill hits operations in flight.
const (
	numClients   = 6
	clientRate   = 2000
	kills        = 3
	upTime       = 1500 * time.Millisecond // traffic between restarts
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
	multi := kvInput{Kind: opMulti, Key: "x", Key2: "n", Value: 5}
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
		// A MULTI's SET is seen but not its INCR: not atomic.
		"torn MULTI": {
			op(0, multi, 0, kvOutput{Value2: 1}, 10),
			op(1, get, 20, kvOutput{Present: true, Value: 5}, 30),
			op(1, kvInput{Kind: opGet, Key: "n"}, 40, kvOutput{}, 50),
		},
		// A MULTI reads a value another write had replaced before it began.
		"MULTI reads a stale value": {
			op(0, set(1), 0, kvOutput{}, 10),
			op(1, multi, 20, kvOutput{Value2: 1}, 30),
		},
		// A WATCHed EXEC ran although the key changed after its GET.
		"WATCH missed a write": {
			op(0, set(1), 0, kvOutput{}, 10),
			op(1, kvInput{Kind: opWatch, Key: "x", Value: 9}, 20, kvOutput{Applied: true}, 30),
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
		op(0, multi, 70, kvOutput{Present: true, Value: 3, Value2: 6}, 80),
		op(1, kvInput{Kind: opWatch, Key: "x", Value: 9}, 90, kvOutput{Present: true, Value: 5, Applied: true}, 100),
		op(2, kvInput{Kind: opWatch, Key: "x", Value: 8}, 110, kvOutput{Present: true, Value: 5}, 120),
		op(2, get, 130, kvOutput{Present: true, Value: 9}, 140),
	}
	if !porcupine.CheckOperations(kvModel, good) {
		t.Fatal("checker rejected a linearizable history")
	}
}

func TestCheckerRejectsNonLinearizableHistories(t *testing.T) {
	checkerRejectsBadHistories(t)
}

// runWithKills drives numClients clients against target while victims[k]
// is killed and restarted in round k, and returns the recorded history.
func runWithKills(t *testing.T, target Target, victims []int) []porcupine.Operation {
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
	var faultErr error
	var killedAt []int64
	for k := 0; k < kills && faultErr == nil; k++ {
		victim := victims[k%len(victims)]
		name := target.Victims()[victim]
		time.Sleep(upTime)
		killedAt = append(killedAt, rec.now())
		if faultErr = target.Kill(victim); faultErr != nil {
			faultErr = fmt.Errorf("kill %s: %v", name, faultErr)
			break
		}
		time.Sleep(target.DownTime())
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
	t.Logf("%d clients, %d kills: %d operations completed, %d indeterminate, %d not sent",
		numClients, kills, total.completed, total.indeterminate, total.notSent)
	if total.completed < 1000 {
		t.Fatalf("only %d operations completed: the run proves little", total.completed)
	}
	if target.ClientsSeeFaults() {
		if total.indeterminate+total.notSent < kills {
			t.Fatalf("%d kills failed only %d operations: the faults missed the traffic",
				kills, total.indeterminate+total.notSent)
		}
	} else {
		// Clients wait through a fault: every kill must have caught
		// operations in flight, which then completed.
		history := rec.history()
		for k, at := range killedAt {
			spanning := 0
			for _, o := range history {
				if o.Call < at && at < o.Return && o.Return != never {
					spanning++
				}
			}
			if spanning == 0 {
				t.Fatalf("kill %d caught no operation in flight: the faults missed the traffic", k+1)
			}
			t.Logf("kill %d: %d operations in flight completed after it", k+1, spanning)
		}
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
	defer closeTarget(t, target)
	checkHistory(t, runWithKills(t, target, []int{0}))
}

// TestClusterServerKill: two gateways on a PDPM cluster of three servers
// with two copies of every segment; each round kills another server with
// SIGKILL (its vnodes move to their backups while clients wait) and
// restarts it on its PM file.
func TestClusterServerKill(t *testing.T) {
	checkerRejectsBadHistories(t)
	bin := clusterBinaries{monitor: os.Getenv("PDPM_MONITOR"), server: os.Getenv("PDPM_SERVER"),
		gateway: os.Getenv("PDKVS_GATEWAY")}
	if bin.monitor == "" || bin.server == "" || bin.gateway == "" {
		t.Fatal("PDPM_MONITOR, PDPM_SERVER and PDKVS_GATEWAY must name the binaries " +
			"(make test-kv-linearizability sets them)")
	}
	pmDir := os.Getenv("PDPM_TEST_PM_DIR")
	if pmDir == "" {
		pmDir = "/dev/shm"
	}
	target, err := startCluster(bin, pmDir)
	if err != nil {
		t.Fatal(err)
	}
	defer closeTarget(t, target)
	checkHistory(t, runWithKills(t, target, []int{0, 1, 2}))
}

// closeTarget stops the target, first printing its logs' last lines when
// the test failed.
func closeTarget(t *testing.T, target Target) {
	if t.Failed() {
		for _, path := range target.Logs() {
			b, err := os.ReadFile(path)
			if err != nil {
				continue
			}
			lines := strings.Split(strings.TrimRight(string(b), "\n"), "\n")
			if len(lines) > 20 {
				lines = lines[len(lines)-20:]
			}
			t.Logf("last lines of %s:\n%s", filepath.Base(path), strings.Join(lines, "\n"))
		}
	}
	target.Close()
}
