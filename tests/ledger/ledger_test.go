package ledger

import (
	"context"
	"errors"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
)

func TestAccountsForEveryCall(t *testing.T) {
	r := Run(context.Background(), Options{Calls: 100, Concurrency: 10}, func(ctx context.Context, i int) error {
		switch i % 4 {
		case 0:
			return status.Error(codes.Unavailable, "executor went away")
		case 1:
			return errors.New("not a status")
		case 2:
			return status.Error(codes.Internal, "")
		}
		return nil
	})
	for _, c := range []struct {
		what      string
		got, want int
	}{
		{"sent", r.Sent, 100},
		{"ok", r.OK, 25},
		{"failed", r.Failed, 75},
		{"unanswered", r.Unanswered, 0},
	} {
		t.Run(c.what, func(t *testing.T) {
			assert.Equal(t, c.want, c.got, "report %v", r)
		})
	}
	assert.Len(t, r.Unclear, 50, "unclear errors (no status, empty message)")
	assert.Equal(t, 25, r.Codes[codes.Unavailable], "codes = %v", r.Codes)
}

func TestCountsUnansweredCalls(t *testing.T) {
	release := make(chan struct{})
	defer close(release)
	r := Run(context.Background(), Options{Calls: 5, Concurrency: 5, Deadline: 10 * time.Millisecond, Grace: 10 * time.Millisecond},
		func(ctx context.Context, i int) error {
			if i == 3 {
				<-release // ignores its deadline
			}
			return nil
		})
	assert.Equal(t, 1, r.Unanswered, "unanswered in report %v", r)
	assert.Equal(t, 4, r.OK, "ok in report %v", r)
}

func TestBackground(t *testing.T) {
	release := make(chan struct{})
	p := Background(context.Background(), Options{Calls: 10, Concurrency: 10}, func(ctx context.Context, i int) error {
		if i >= 5 {
			<-release
		}
		return nil
	})
	for p.Answered() < 5 {
		time.Sleep(time.Millisecond)
	}
	close(release)
	r := p.Wait()
	assert.Equal(t, 10, r.OK, "ok in report %v", r)
	assert.Equal(t, 10, p.Answered(), "answered")
}
