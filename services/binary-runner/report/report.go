// Package report tells the config-reconciler which binary executors of the
// executor table this binary-runner cannot run. The reconciler cannot look
// at the runners' filesystems: after every table the runner applies (and
// again every Options.Recheck, in case a file appeared or went), it checks
// every binary executor's path as a call would resolve it and reports the
// ones it cannot run, an empty list included, since each report replaces
// the runner's last one. The reconciler puts them in the FunctionConfigs'
// status; calls for them go on to the pod executor meanwhile.
package report

import (
	"context"
	"fmt"
	"log/slog"
	"slices"
	"time"

	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
	"google.golang.org/protobuf/proto"

	"github.com/fnrunner/fnrunner/libs/executortable"
	"github.com/fnrunner/fnrunner/libs/reporttoken"
	configpb "github.com/fnrunner/fnrunner/protos/configstream"
	"github.com/fnrunner/fnrunner/services/binary-runner/binpath"
)

// Tables gives the executor table as it changes; *configclient.Client
// implements it.
type Tables interface {
	// Current returns the newest table (nil before the first) and a
	// channel closed when a newer one arrives.
	Current() (*executortable.Tables, <-chan struct{})
}

// Sender delivers a report to the config-reconciler; *configclient.Client
// implements it.
type Sender interface {
	Report(ctx context.Context, r *configpb.RunnerReport) error
}

// Check says whether this runner can run a binary executor path: nil, or
// why not (binpath.Resolve's errors).
type Check func(path string) error

// Options configure a Reporter.
type Options struct {
	// Runner names this runner: its pod, or outside a cluster its host.
	Runner string
	// RunnerUID is its pod's UID, when it runs in a pod.
	RunnerUID string
	// Recheck is how often the paths are checked again while the table
	// stays the same; a changed result is reported. 0: only on new tables.
	Recheck time.Duration
	// Timeout bounds one Report call (default 10 s).
	Timeout time.Duration
	// Resend is how long a delivered report stands before it is sent
	// again unchanged (default 10 minutes): a report stored under this
	// runner's name by someone else (a function that read its token) does
	// not stand for good.
	Resend time.Duration
	// Token, when set, gives the proof of this runner's pod sent with every
	// report (reporttoken.File: a projected service account token, read
	// anew each time as the kubelet rotates it).
	Token func() (string, error)
}

// Backoff bounds between attempts after a failed Report.
const (
	minBackoff = time.Second
	maxBackoff = time.Minute
)

// Reporter reports on every table this runner applies.
type Reporter struct {
	tables Tables
	sender Sender
	check  Check
	opts   Options
	log    *slog.Logger
}

// New returns a reporter; Run starts it.
func New(log *slog.Logger, tables Tables, sender Sender, check Check, opts Options) *Reporter {
	if opts.Timeout <= 0 {
		opts.Timeout = 10 * time.Second
	}
	if opts.Resend <= 0 {
		opts.Resend = 10 * time.Minute
	}
	return &Reporter{tables: tables, sender: sender, check: check, opts: opts, log: log}
}

// Run reports until ctx ends, on the calling goroutine: after each new
// table, after each Recheck whose result differs from the last report
// delivered, and after a backoff when a report failed (a newer table
// replaces the one that failed).
func (r *Reporter) Run(ctx context.Context) {
	var delivered *configpb.RunnerReport
	var deliveredAt time.Time
	backoff := time.Duration(0)
	toldRefused := false
	for {
		tables, changed := r.tables.Current()
		var retry, recheck <-chan time.Time
		if tables != nil {
			rep := r.Report(tables)
			if delivered == nil || !proto.Equal(rep, delivered) || time.Since(deliveredAt) >= r.opts.Resend {
				err := r.send(ctx, rep)
				switch {
				case ctx.Err() != nil:
					return
				case err == nil:
					r.logChange(rep, delivered)
					delivered, deliveredAt, backoff, toldRefused = rep, time.Now(), 0, false
				case status.Code(err) == codes.Unimplemented, status.Code(err) == codes.PermissionDenied, status.Code(err) == codes.Unauthenticated:
					// A config-reconciler from before reports, one that
					// does not know this runner as a pod of its
					// namespace, or one that wants a token this runner
					// does not have (--report-token-file): try again
					// with the next table (or recheck), without
					// retrying in between.
					if !toldRefused {
						r.log.Warn("the config-reconciler takes no runner reports from this runner; status will not show binaries it cannot run", "error", err)
						toldRefused = true
					}
				default:
					backoff = min(max(2*backoff, minBackoff), maxBackoff)
					r.log.Warn("reporting unrunnable binaries to the config-reconciler", "error", err, "retry_in", backoff.String())
					retry = time.After(backoff)
				}
			}
			if r.opts.Recheck > 0 {
				recheck = time.After(r.opts.Recheck)
			}
		}
		select {
		case <-ctx.Done():
			return
		case <-changed:
		case <-retry:
		case <-recheck:
		}
	}
}

func (r *Reporter) send(ctx context.Context, rep *configpb.RunnerReport) error {
	ctx, cancel := context.WithTimeout(ctx, r.opts.Timeout)
	defer cancel()
	if r.opts.Token != nil {
		tok, err := r.opts.Token()
		if err != nil {
			return err
		}
		ctx = reporttoken.Attach(ctx, tok)
	}
	return r.sender.Report(ctx, rep)
}

// logChange logs what the report says when it differs from the last one
// delivered (the tables' version aside).
func (r *Reporter) logChange(rep, last *configpb.RunnerReport) {
	if last != nil && slices.EqualFunc(rep.GetUnrunnable(), last.GetUnrunnable(), func(a, b *configpb.UnrunnableBinary) bool { return proto.Equal(a, b) }) {
		return
	}
	if len(rep.GetUnrunnable()) == 0 {
		r.log.Info("every binary executor of the table is runnable here", "epoch", rep.GetEpoch(), "version", rep.GetVersion())
		return
	}
	var named []string
	for _, u := range rep.GetUnrunnable() {
		named = append(named, fmt.Sprintf("%s/%s: %s: %s", u.GetNamespace(), u.GetName(), u.GetPath(), u.GetReason()))
	}
	r.log.Warn("binary executors this runner cannot run (reported; their calls go on to the pod executor)",
		"epoch", rep.GetEpoch(), "version", rep.GetVersion(), "unrunnable", named)
}

// Report is this runner's report on tables.
func (r *Reporter) Report(tables *executortable.Tables) *configpb.RunnerReport {
	return &configpb.RunnerReport{
		Runner:     r.opts.Runner,
		RunnerUid:  r.opts.RunnerUID,
		Epoch:      tables.Epoch,
		Version:    tables.Version,
		Unrunnable: Unrunnable(tables.Functions(), r.check),
	}
}

// Unrunnable lists the binary executors of functions that check refuses,
// in the functions' order; each path is checked once.
func Unrunnable(functions []*configpb.FunctionConfig, check Check) []*configpb.UnrunnableBinary {
	var out []*configpb.UnrunnableBinary
	reasons := map[string]string{}
	for _, fc := range functions {
		if fc.GetBinary() == nil {
			continue
		}
		path := fc.GetBinary().GetPath()
		reason, seen := reasons[path]
		if !seen {
			reason = binpath.Reason(check(path))
			reasons[path] = reason
		}
		if reason != "" {
			out = append(out, &configpb.UnrunnableBinary{Namespace: fc.GetNamespace(), Name: fc.GetName(), Path: path, Reason: reason})
		}
	}
	return out
}
