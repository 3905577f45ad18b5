package monitoring_test

import (
	"fmt"
	"regexp"
	"slices"
	"strconv"
	"strings"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// comparisons are PromQL's comparison operators, longest first.
var comparisons = []string{"==", "!=", ">=", "<=", ">", "<"}

// stripThreshold splits an alert's expression at its last comparison
// outside parentheses, braces, brackets and strings, whose right side must
// be a number (the threshold): "expr > 0.05" → "expr", ">", 0.05.
// Comments are dropped.
func stripThreshold(expr string) (lhs, op string, threshold float64, err error) {
	expr, err = dropComments(expr)
	if err != nil {
		return "", "", 0, err
	}
	depth := 0
	last, lastOp := -1, ""
	for i := 0; i < len(expr); i++ {
		c := expr[i]
		switch c {
		case '"', '\'', '`':
			if i, err = stringEnd(expr, i); err != nil {
				return "", "", 0, err
			}
			continue
		case '(', '{', '[':
			depth++
			continue
		case ')', '}', ']':
			depth--
			if depth < 0 {
				return "", "", 0, fmt.Errorf("unbalanced %q in %q", c, expr)
			}
			continue
		}
		if depth != 0 {
			continue
		}
		for _, o := range comparisons {
			if strings.HasPrefix(expr[i:], o) {
				last, lastOp = i, o
				i += len(o) - 1
				break
			}
		}
	}
	if depth != 0 {
		return "", "", 0, fmt.Errorf("unbalanced brackets in %q", expr)
	}
	if last < 0 {
		return "", "", 0, fmt.Errorf("no comparison outside brackets in %q", expr)
	}
	rhs := strings.TrimSpace(expr[last+len(lastOp):])
	threshold, err = strconv.ParseFloat(rhs, 64)
	if err != nil {
		return "", "", 0, fmt.Errorf("the last comparison of %q is not with a number (%q)", expr, rhs)
	}
	lhs = strings.TrimSpace(expr[:last])
	if lhs == "" {
		return "", "", 0, fmt.Errorf("nothing before the comparison in %q", expr)
	}
	return lhs, lastOp, threshold, nil
}

// dropComments removes PromQL's comments (# to the end of the line,
// outside strings).
func dropComments(expr string) (string, error) {
	var b strings.Builder
	for i := 0; i < len(expr); i++ {
		c := expr[i]
		switch c {
		case '"', '\'', '`':
			j, err := stringEnd(expr, i)
			if err != nil {
				return "", err
			}
			b.WriteString(expr[i : j+1])
			i = j
		case '#':
			for i < len(expr) && expr[i] != '\n' {
				i++
			}
			b.WriteByte('\n')
		default:
			b.WriteByte(c)
		}
	}
	return b.String(), nil
}

// stringEnd is the index of the quote that ends the PromQL string starting
// at expr[i] (backquoted strings have no escapes).
func stringEnd(expr string, i int) (int, error) {
	q := expr[i]
	j := i + 1
	for ; j < len(expr) && expr[j] != q; j++ {
		if expr[j] == '\\' && q != '`' {
			j++
		}
	}
	if j >= len(expr) {
		return 0, fmt.Errorf("unterminated string in %q", expr)
	}
	return j, nil
}

var metricNameRE = regexp.MustCompile(`\bfnrunner_[a-z0-9_]+\b`)

// metricNames are the fnrunner_ metric names an expression reads, sorted
// and unique.
func metricNames(expr string) []string {
	names := metricNameRE.FindAllString(expr, -1)
	slices.Sort(names)
	return slices.Compact(names)
}

func TestStripThreshold(t *testing.T) {
	tests := []struct {
		expr, lhs, op string
		threshold     float64
	}{
		{expr: "a / b > 0.05", lhs: "a / b", op: ">", threshold: 0.05},
		{expr: "sum by (job) (rate(x{code!~\"OK|A\"}[5m]))\n  > 30\n", lhs: "sum by (job) (rate(x{code!~\"OK|A\"}[5m]))", op: ">", threshold: 30},
		{expr: "min(x{job=\"a\"} > 0) - on() group_right() y > 60", lhs: "min(x{job=\"a\"} > 0) - on() group_right() y", op: ">", threshold: 60},
		{expr: "x{a=\"b>1\"} <= 1e3", lhs: "x{a=\"b>1\"}", op: "<=", threshold: 1000},
		{expr: "x == 0", lhs: "x", op: "==", threshold: 0},
		{expr: "x != 2 # not 1 > 0", lhs: "x", op: "!=", threshold: 2},
	}
	for _, tc := range tests {
		lhs, op, threshold, err := stripThreshold(tc.expr)
		require.NoError(t, err, tc.expr)
		assert.Equal(t, tc.lhs, lhs, tc.expr)
		assert.Equal(t, tc.op, op, tc.expr)
		assert.Equal(t, tc.threshold, threshold, tc.expr)
	}
	for _, bad := range []string{"sum(x)", "x > y", "(x > 1)", "x{a=\"1\" > 1", "> 1"} {
		_, _, _, err := stripThreshold(bad)
		assert.Error(t, err, bad)
	}
}

func TestMetricNames(t *testing.T) {
	assert.Equal(t, []string{"fnrunner_a_bucket", "fnrunner_b_total"},
		metricNames(`rate(fnrunner_b_total[5m]) / histogram_quantile(0.9, fnrunner_a_bucket) + fnrunner_b_total`))
}
