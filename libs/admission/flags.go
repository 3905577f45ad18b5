package admission

import (
	"flag"
	"fmt"
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
	fs.Int64Var(&f.MaxQueueBytes, "max-queue-bytes", queueBytes, "Bytes of requests the calls waiting for --max-in-flight-bytes may hold together (a waiting call holds its whole request); a call that would go over is refused at once with ResourceExhausted (queue full), unless no other call waits (so 0 still lets one call wait; --max-queue=0 lets none). Keep --max-in-flight-bytes plus this under the container's memory limit.")
}

// Limiter is the limiter the flags say.
func (f *Flags) Limiter() *Weighted {
	return NewWeighted(f.MaxInFlightBytes, f.MaxQueue, f.MaxQueueBytes)
}
