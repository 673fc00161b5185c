package linearizability

import (
	"context"
	"errors"
	"fmt"
	"math"
	"math/rand"
	"net"
	"strings"
	"sync"
	"time"

	"github.com/anishathalye/porcupine"
	"github.com/redis/go-redis/v9"
)

// never is the response time of an operation whose outcome is unknown: it
// may take effect at any point after its invocation.
const never = math.MaxInt64

// recorder collects the operations of every client against one clock.
type recorder struct {
	start time.Time
	mu    sync.Mutex
	ops   []porcupine.Operation
}

func newRecorder() *recorder { return &recorder{start: time.Now()} }

// now is nanoseconds on the monotonic clock since the recorder began.
func (r *recorder) now() int64 { return int64(time.Since(r.start)) }

func (r *recorder) add(client int, in kvInput, call int64, out kvOutput, ret int64) {
	r.mu.Lock()
	defer r.mu.Unlock()
	r.ops = append(r.ops, porcupine.Operation{ClientId: client, Input: in, Call: call, Output: out, Return: ret})
}

func (r *recorder) history() []porcupine.Operation {
	r.mu.Lock()
	defer r.mu.Unlock()
	return append([]porcupine.Operation(nil), r.ops...)
}

// outcome says what an error of a command means for the history.
type outcome int

const (
	completed     outcome = iota // a reply arrived (nil included)
	notSent                      // the connection could not be opened: no effect
	indeterminate                // the request may have reached the server
)

func classify(err error) (outcome, error) {
	if err == nil || errors.Is(err, redis.Nil) {
		return completed, nil
	}
	var replyErr redis.Error
	if errors.As(err, &replyErr) {
		// The gateway's words for a request its store could not finish
		// during a failover (its server failed while it was in flight, so it
		// may or may not have been applied and was not sent again) or while
		// other writers held its keys: an open operation, like a lost
		// connection.
		if strings.HasPrefix(replyErr.Error(), "CLUSTERDOWN") ||
			strings.HasPrefix(replyErr.Error(), "TRYAGAIN") {
			return indeterminate, nil
		}
		// Any other error reply is a wrong answer here: every value is an
		// integer.
		return completed, fmt.Errorf("error reply: %v", err)
	}
	var netErr *net.OpError
	if errors.As(err, &netErr) && netErr.Op == "dial" {
		return notSent, nil
	}
	return indeterminate, nil
}

// issue runs one command and converts its reply to the model's output.
func issue(ctx context.Context, c *redis.Client, in kvInput) (kvOutput, error) {
	var out kvOutput
	var err error
	switch in.Kind {
	case opGet:
		out.Value, err = c.Get(ctx, in.Key).Int64()
		out.Present = err == nil
	case opSet:
		err = c.Set(ctx, in.Key, in.Value, 0).Err()
	case opIncr:
		out.Value, err = c.Incr(ctx, in.Key).Result()
	case opSetNX:
		err = c.SetArgs(ctx, in.Key, in.Value, redis.SetArgs{Mode: "NX"}).Err()
		out.Applied = err == nil
	case opGetSet:
		out.Value, err = c.GetSet(ctx, in.Key, in.Value).Int64()
		out.Present = err == nil
	case opDel:
		var n int64
		n, err = c.Del(ctx, in.Key).Result()
		out.Applied = n == 1
	case opMulti:
		var get *redis.StringCmd
		var incr *redis.IntCmd
		_, err = c.TxPipelined(ctx, func(p redis.Pipeliner) error {
			get = p.Get(ctx, in.Key)
			incr = p.Incr(ctx, in.Key2)
			p.Set(ctx, in.Key, in.Value, 0)
			return nil
		})
		if err == nil || errors.Is(err, redis.Nil) { // the GET's nil fails the pipeline
			var gerr error
			out.Value, gerr = get.Int64()
			out.Present = gerr == nil
			out.Value2, err = incr.Result()
		}
	case opWatch:
		err = c.Watch(ctx, func(tx *redis.Tx) error {
			v, gerr := tx.Get(ctx, in.Key).Int64()
			if gerr != nil && !errors.Is(gerr, redis.Nil) {
				return gerr
			}
			out.Present, out.Value = gerr == nil, v
			_, perr := tx.TxPipelined(ctx, func(p redis.Pipeliner) error {
				p.Set(ctx, in.Key, in.Value, 0)
				return nil
			})
			return perr
		}, in.Key)
		out.Applied = err == nil
		if errors.Is(err, redis.TxFailedErr) { // a null EXEC: the key was written since the GET
			err = nil
		}
	}
	return out, err
}

// randomInput draws an operation: reads most, every kind of write often.
// Written values are unique per client so that a read names its write. A
// MULTI increments the key paired with its own (keys 0 and 1, 2 and 3, ...),
// so the keys fall in groups the checker takes apart.
func randomInput(rng *rand.Rand, client int, seq int64, keys []string) kvInput {
	i := rng.Intn(len(keys))
	in := kvInput{Key: keys[i], Value: int64(client+1)*1_000_000_000 + seq}
	switch p := rng.Intn(100); {
	case p < 6:
		in.Kind = opMulti
		in.Key2 = keys[i^1]
	case p < 12:
		in.Kind = opWatch
	case p < 35:
		in.Kind = opGet
	case p < 50:
		in.Kind = opSet
	case p < 70:
		in.Kind = opIncr
	case p < 80:
		in.Kind = opSetNX
	case p < 90:
		in.Kind = opGetSet
	default:
		in.Kind = opDel
	}
	return in
}

func newClient(addr string, protocol int) *redis.Client {
	return redis.NewClient(&redis.Options{
		Addr:            addr,
		Protocol:        protocol,
		PoolSize:        1,
		MaxRetries:      -1, // a retried INCR could apply twice: never retry
		DialTimeout:     time.Second,
		ReadTimeout:     5 * time.Second,
		WriteTimeout:    5 * time.Second,
		DisableIdentity: true,
	})
}

// clientStats counts what one client saw.
type clientStats struct {
	completed, indeterminate, notSent int
}

// runClient issues random operations until stop is closed, at most
// maxRate a second, recording each. After an indeterminate operation it
// waits (unrecorded PINGs) until the service answers again, so that each
// outage leaves at most one open operation per client.
func runClient(ctx context.Context, rec *recorder, id int, addr string, protocol int, seed int64,
	keys []string, maxRate int, stop <-chan struct{}) (clientStats, error) {
	c := newClient(addr, protocol)
	defer c.Close()
	rng := rand.New(rand.NewSource(seed))
	var st clientStats
	start := time.Now()
	for seq := int64(0); ; seq++ {
		select {
		case <-stop:
			return st, nil
		default:
		}
		if due := start.Add(time.Duration(seq) * time.Second / time.Duration(maxRate)); time.Now().Before(due) {
			time.Sleep(time.Until(due))
		}
		in := randomInput(rng, id, seq, keys)
		call := rec.now()
		out, err := issue(ctx, c, in)
		ret := rec.now()
		kind, bad := classify(err)
		if bad != nil {
			return st, fmt.Errorf("client %d: %v %s: %v", id, in.Kind, in.Key, bad)
		}
		switch kind {
		case completed:
			st.completed++
			rec.add(id, in, call, out, ret)
		case notSent:
			st.notSent++
			time.Sleep(10 * time.Millisecond) // the service is down: do not spin
		case indeterminate:
			st.indeterminate++
			if in.Kind != opGet { // an unknown read constrains nothing
				// WATCH's read came back before its EXEC failed: kept.
				rec.add(id, in, call, kvOutput{Unknown: true, Present: out.Present, Value: out.Value}, never)
			}
			for c.Ping(ctx).Err() != nil {
				select {
				case <-stop:
					return st, nil
				case <-time.After(20 * time.Millisecond):
				}
			}
		}
	}
}
