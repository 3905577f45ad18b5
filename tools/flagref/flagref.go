package main

import (
	"bytes"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
)

// Service is one service binary whose flags the reference lists.
type Service struct {
	// Name is the section's title, e.g. "gateway".
	Name string
	// Binary is the path of the service's executable.
	Binary string
}

// Flag is one flag as the flag package's PrintDefaults shows it.
type Flag struct {
	Name string
	// Type is the flag's value type as --help names it ("string",
	// "duration", "value"); empty for a boolean flag.
	Type string
	// Default is the default as --help shows it, strings unquoted; empty
	// when --help shows none.
	Default string
	Usage   string
}

// Help is a service's --help: the text before its flags, and the flags.
type Help struct {
	Header string
	Flags  []Flag
}

// Placeholders for defaults that depend on the machine the binary runs on.
const (
	cpusPlaceholder     = "<GOMAXPROCS>"
	hostPlaceholder     = "<host name>"
	exeDirPlaceholder   = "<executable's directory>"
	tempDirPlaceholder  = "<temp dir>"
	homeDirPlaceholder  = "<home dir>"
	flagPrefix          = "  -"
	usagePrefix         = "    \t"
	defaultMarker       = " (default "
	porchIgnoredPrefix  = "Porch's "
	porchIgnoredContent = "accepted and ignored"
)

// probe is one environment a service's --help is read under. Two probes
// differ in everything a default may be derived from through the
// environment, so that a default that changes between them is known to
// depend on the host.
type probe struct {
	gomaxprocs, tmp, home string
}

var probes = [2]probe{
	{gomaxprocs: "19", tmp: "/tmp/flagref-probe-a", home: "/flagref-home-a"},
	{gomaxprocs: "23", tmp: "/tmp/flagref-probe-b", home: "/flagref-home-b"},
}

func (p probe) env() []string {
	return []string{"GOMAXPROCS=" + p.gomaxprocs, "TMPDIR=" + p.tmp, "HOME=" + p.home}
}

// Read runs the service with --help under each probe's environment and
// returns its flags with every host-dependent default normalised: a value
// set by GOMAXPROCS, the temp or home directory, the host name or the
// binary's own path is replaced by a placeholder. A default that still
// differs between the probes is an error: flagref must learn to normalise
// it.
func Read(s Service) (Help, error) {
	host, err := os.Hostname()
	if err != nil {
		return Help{}, err
	}
	dirs := exeDirs(s.Binary)
	var helps [len(probes)]Help
	for i, p := range probes {
		out, err := help(s.Binary, p.env())
		if err != nil {
			return Help{}, fmt.Errorf("%s --help: %w", s.Name, err)
		}
		h, err := Parse(out)
		if err != nil {
			return Help{}, fmt.Errorf("%s --help: %w", s.Name, err)
		}
		for j := range h.Flags {
			f := &h.Flags[j]
			f.Default = normalise(f.Default, p, host, dirs)
			f.Usage = replaceDirs(f.Usage, dirs)
		}
		h.Header = replaceDirs(h.Header, dirs)
		helps[i] = h
	}
	a, b := helps[0], helps[1]
	if a.Header != b.Header || len(a.Flags) != len(b.Flags) {
		return Help{}, fmt.Errorf("%s --help changes with the environment (GOMAXPROCS, TMPDIR, HOME)", s.Name)
	}
	for i := range a.Flags {
		if a.Flags[i] != b.Flags[i] {
			return Help{}, fmt.Errorf("%s --%s: its default changes with the environment (%q, then %q): teach tools/flagref to normalise it", s.Name, a.Flags[i].Name, a.Flags[i].Default, b.Flags[i].Default)
		}
	}
	return a, nil
}

// help runs binary --help with env alone, so that nothing else of this
// process's environment ($POD_NAME, $WRAPPER_SERVER_IMAGE, $KUBECONFIG)
// reaches a default. The flag package answers --help with exit code 0
// (the services) or 2 (flag.ExitOnError).
func help(binary string, env []string) (string, error) {
	cmd := exec.Command(binary, "--help")
	cmd.Env = env
	var out bytes.Buffer
	cmd.Stdout, cmd.Stderr = &out, &out
	err := cmd.Run()
	var exit *exec.ExitError
	if err != nil && !(errors.As(err, &exit) && exit.ExitCode() == 2) {
		return "", fmt.Errorf("%w\n%s", err, out.String())
	}
	return out.String(), nil
}

// exeDirs are the directories binary's own path may show in its help: as
// given, made absolute, and with symbolic links resolved (os.Executable's
// answer), longest first so that no shorter one replaces part of another.
func exeDirs(binary string) []string {
	dirs := []string{filepath.Dir(binary)}
	if abs, err := filepath.Abs(binary); err == nil {
		dirs = append(dirs, filepath.Dir(abs))
		if real, err := filepath.EvalSymlinks(abs); err == nil {
			dirs = append(dirs, filepath.Dir(real))
		}
	}
	slices.SortFunc(dirs, func(a, b string) int { return len(b) - len(a) })
	return slices.Compact(dirs)
}

func replaceDirs(s string, dirs []string) string {
	for _, d := range dirs {
		if d != "." && d != "/" {
			s = strings.ReplaceAll(s, d+"/", exeDirPlaceholder+"/")
		}
	}
	return s
}

// normalise replaces what a default took from the host with a placeholder.
func normalise(def string, p probe, host string, dirs []string) string {
	switch def {
	case "":
		return def
	case p.gomaxprocs:
		return cpusPlaceholder
	case host:
		return hostPlaceholder
	}
	def = replaceDirs(def, dirs)
	def = strings.ReplaceAll(def, p.tmp, tempDirPlaceholder)
	return strings.ReplaceAll(def, p.home, homeDirPlaceholder)
}

// Parse reads the output of a flag.FlagSet's usage: a header, then each
// flag as PrintDefaults writes it, a line "  -name type" followed by lines
// of usage that start with four spaces and a tab, the last one ending in
// " (default value)" when the flag has a default.
func Parse(out string) (Help, error) {
	lines := strings.Split(strings.TrimRight(out, "\n"), "\n")
	var h Help
	var header []string
	for _, line := range lines {
		switch {
		case strings.HasPrefix(line, flagPrefix):
			name, typ, _ := strings.Cut(strings.TrimPrefix(line, flagPrefix), " ")
			h.Flags = append(h.Flags, Flag{Name: name, Type: strings.TrimSpace(typ)})
		case strings.HasPrefix(line, usagePrefix) && len(h.Flags) > 0:
			f := &h.Flags[len(h.Flags)-1]
			if f.Usage != "" {
				f.Usage += " "
			}
			f.Usage += strings.TrimPrefix(line, usagePrefix)
		case len(h.Flags) == 0:
			header = append(header, line)
		default:
			return Help{}, fmt.Errorf("unexpected line after the flags: %q", line)
		}
	}
	if len(h.Flags) == 0 {
		return Help{}, fmt.Errorf("no flags in:\n%s", out)
	}
	for i := range h.Flags {
		if err := splitDefault(&h.Flags[i]); err != nil {
			return Help{}, err
		}
	}
	h.Header = strings.TrimSpace(strings.TrimSuffix(strings.TrimSpace(strings.Join(header, "\n")), "Flags:"))
	return h, nil
}

// splitDefault moves the " (default ...)" PrintDefaults appends to a
// flag's usage into its Default, unquoting a string's.
func splitDefault(f *Flag) error {
	i := strings.LastIndex(f.Usage, defaultMarker)
	if i < 0 || !strings.HasSuffix(f.Usage, ")") {
		return nil
	}
	def := f.Usage[i+len(defaultMarker) : len(f.Usage)-1]
	if f.Type == "string" {
		s, err := strconv.Unquote(def)
		if err != nil {
			return fmt.Errorf("--%s: default %s: %w", f.Name, def, err)
		}
		def = s
	}
	f.Default, f.Usage = def, f.Usage[:i]
	return nil
}

// porchIgnored says whether f is one of porch's function-runner flags that
// this service accepts and leaves to another (or to none).
func porchIgnored(f Flag) bool {
	return strings.HasPrefix(f.Usage, porchIgnoredPrefix) && strings.Contains(f.Usage, porchIgnoredContent)
}

// Render writes the reference: one section per service, its --help header,
// its own flags, then porch's flags it accepts and ignores.
func Render(command string, services []Service, helps []Help) string {
	var b strings.Builder
	b.WriteString("# Flags\n\n")
	b.WriteString("Every flag of each service, from its `--help`.\n")
	b.WriteString("This file is generated; do not edit it.\n")
	fmt.Fprintf(&b, "Regenerate it with `%s`.\n", command)
	b.WriteString("`//tools/flagref:flagref_test` fails when it is stale.\n\n")
	b.WriteString("A default that depends on the machine is shown as a placeholder:\n")
	fmt.Fprintf(&b, "`%s` (the CPUs the container may use), `%s`, `%s`, `%s` or `%s`.\n",
		cpusPlaceholder, hostPlaceholder, exeDirPlaceholder, tempDirPlaceholder, homeDirPlaceholder)
	b.WriteString("Each service is asked with an environment of its own: a default read from a variable such as `$POD_NAME` is the one it has when the variable is unset.\n")
	for i, s := range services {
		h := helps[i]
		fmt.Fprintf(&b, "\n## %s\n\n```\n%s\n```\n\n", s.Name, h.Header)
		var own, porch []Flag
		for _, f := range h.Flags {
			if porchIgnored(f) {
				porch = append(porch, f)
			} else {
				own = append(own, f)
			}
		}
		for _, f := range own {
			b.WriteString(item(f))
		}
		if len(porch) > 0 {
			fmt.Fprintf(&b, "\nPorch's function-runner flags that the %s accepts and ignores:\n\n", s.Name)
			for _, f := range porch {
				b.WriteString(item(f))
			}
		}
	}
	return b.String()
}

// item is one flag as a list item: name, type and default, then its usage.
func item(f Flag) string {
	var meta []string
	if f.Type != "" {
		meta = append(meta, f.Type)
	} else {
		meta = append(meta, "bool")
	}
	if f.Default != "" {
		meta = append(meta, "default "+code(f.Default))
	}
	return fmt.Sprintf("- `--%s` (%s): %s\n", f.Name, strings.Join(meta, ", "), escape(f.Usage))
}

// code is s as a Markdown code span.
func code(s string) string {
	if strings.Contains(s, "`") {
		return "`` " + s + " ``"
	}
	return "`" + s + "`"
}

// escape keeps Markdown from reading usage text as markup: emphasis,
// HTML tags (<owner>), links and tables.
var escaper = strings.NewReplacer(
	`\`, `\\`, "`", "\\`", "*", `\*`, "_", `\_`, "<", `\<`, ">", `\>`,
	"[", `\[`, "]", `\]`, "|", `\|`,
)

func escape(s string) string { return escaper.Replace(s) }
