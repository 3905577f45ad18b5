package admission

import (
	"errors"
	"flag"
	"fmt"

	"github.com/fnrunner/fnrunner/libs/memlimit"
)

// Flags are a service's --max-in-flight-bytes, --max-queue and
// --max-queue-bytes.
type Flags struct {
	MaxInFlightBytes int64
	MaxQueue         int
	MaxQueueBytes    int64
}

// Register adds the flags to fs with a service's defaults; weighs says how
// the service weighs a call ("input bytes × 2").
func (f *Flags) Register(fs *flag.FlagSet, bytes int64, queue int, queueBytes int64, weighs string) {
	fs.Int64Var(&f.MaxInFlightBytes, "max-in-flight-bytes", bytes, fmt.Sprintf("Memory the calls running may need together, a call weighing %s; calls beyond it wait (up to their deadline).", weighs))
	fs.IntVar(&f.MaxQueue, "max-queue", queue, "Calls that may wait for --max-in-flight-bytes; more are refused at once with ResourceExhausted (queue full).")
	fs.Int64Var(&f.MaxQueueBytes, "max-queue-bytes", queueBytes, "Bytes of requests the calls waiting for --max-in-flight-bytes may hold together (a waiting call holds its whole request); a call that would go over is refused at once with ResourceExhausted (queue full), unless no other call waits (so 0 still lets one call wait; --max-queue=0 lets none). With --max-in-flight-bytes and the service's own headroom, it must fit the container's memory limit (checked at start).")
}

// Limiter is the limiter the flags say.
func (f *Flags) Limiter() *Weighted {
	return NewWeighted(f.MaxInFlightBytes, f.MaxQueue, f.MaxQueueBytes)
}

// RuntimeHeadroom is a service's own memory beside its calls and what its
// transport holds: the Go runtime, the executor table, caches.
const RuntimeHeadroom = 64 << 20

// FitContainer is Fit against the memory limit of this process's cgroup.
func (f *Flags) FitContainer(headroom int64) error {
	limit, ok, err := memlimit.Cgroups{}.Limit()
	if err != nil {
		return err
	}
	return f.Fit(limit, ok, headroom)
}

// ErrOverContainer is a budget that does not fit the container's memory.
var ErrOverContainer = errors.New("admission budget over the container's memory limit")

// Fit checks that what admission lets in, with headroom for the rest of
// the service (requests being received, the runtime), fits limit: the
// memory limit of the service's cgroup (package memlimit), ok false when
// none is set. Past that limit the kubelet would kill the container with
// every call in flight, so a service refuses to start instead.
func (f *Flags) Fit(limit uint64, ok bool, headroom int64) error {
	need := f.MaxInFlightBytes + f.MaxQueueBytes + headroom
	if !ok || need <= int64(min(limit, 1<<62)) {
		return nil
	}
	return fmt.Errorf("%w: --max-in-flight-bytes %d MiB + --max-queue-bytes %d MiB + %d MiB for the rest of the service (its transport's bounds and runtime) = %d MiB, over the %d MiB limit of its cgroup; lower them or raise the limit",
		ErrOverContainer, f.MaxInFlightBytes>>20, f.MaxQueueBytes>>20, headroom>>20, need>>20, limit>>20)
}
