// Package events prints the JSON lines the check commands report on stdout, one event
// a line, whole even when goroutines report at once.
package events

import (
	"encoding/json"
	"os"
	"sync"
)

var out sync.Mutex

// Emit prints one event.
func Emit(fields map[string]any) {
	line, _ := json.Marshal(fields)
	out.Lock()
	defer out.Unlock()
	os.Stdout.Write(append(line, '\n'))
}

// Fail prints {"event":"error","error":...} and exits with status 1.
func Fail(err error) {
	Emit(map[string]any{"event": "error", "error": err.Error()})
	os.Exit(1)
}
