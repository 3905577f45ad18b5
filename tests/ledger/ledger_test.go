package ledger

import (
	"context"
	"errors"
	"testing"
	"time"

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
	if r.Sent != 100 || r.OK != 25 || r.Failed != 75 || r.Unanswered != 0 || r.Twice != 0 {
		t.Errorf("report = %v", r)
	}
	if len(r.Unclear) != 50 {
		t.Errorf("%d unclear errors, want 50 (no status, empty message)", len(r.Unclear))
	}
	if r.Codes[codes.Unavailable] != 25 {
		t.Errorf("codes = %v", r.Codes)
	}
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
	if r.Unanswered != 1 || r.OK != 4 {
		t.Errorf("report = %v, want one unanswered", r)
	}
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
	if r := p.Wait(); r.OK != 10 || p.Answered() != 10 {
		t.Errorf("report = %v, answered = %d", r, p.Answered())
	}
}
