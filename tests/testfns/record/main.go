// Command record is a KRM function that records each run on the function's
// side, so a test can prove that no call ran twice: it appends the call id
// (functionConfig data.callId) as one line to the file data.ledger, waits
// data.sleep (to keep calls in flight), and returns the ResourceList as it
// came.
package main

import (
	"fmt"
	"io"
	"os"
	"time"

	"sigs.k8s.io/yaml"
)

type resourceList struct {
	FunctionConfig struct {
		Data map[string]string `json:"data"`
	} `json:"functionConfig"`
}

func main() {
	if err := run(); err != nil {
		fmt.Fprintln(os.Stderr, "record:", err)
		os.Exit(1)
	}
}

func run() error {
	in, err := io.ReadAll(os.Stdin)
	if err != nil {
		return err
	}
	var rl resourceList
	if err := yaml.Unmarshal(in, &rl); err != nil {
		return err
	}
	data := rl.FunctionConfig.Data
	if data["ledger"] == "" || data["callId"] == "" {
		return fmt.Errorf("functionConfig data.ledger and data.callId are required")
	}
	f, err := os.OpenFile(data["ledger"], os.O_WRONLY|os.O_APPEND|os.O_CREATE, 0o644)
	if err != nil {
		return err
	}
	// One write of one short line: appends from concurrent runs never mix.
	if _, err := f.WriteString(data["callId"] + "\n"); err != nil {
		f.Close()
		return err
	}
	if err := f.Close(); err != nil {
		return err
	}
	if d, err := time.ParseDuration(data["sleep"]); err == nil {
		time.Sleep(d)
	}
	_, err = os.Stdout.Write(in)
	return err
}
