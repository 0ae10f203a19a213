// Package mlog stands in for monis.app/mlog (unreachable from the module proxy here): the API
// azure-workload-identity's webhook uses, logging through go-logr's funcr to stderr.
package mlog

import (
	"context"
	"fmt"
	"os"
	"sync/atomic"

	"github.com/go-logr/logr"
	"github.com/go-logr/logr/funcr"
)

// LogLevel names a verbosity, as monis.app/mlog's.
type LogLevel string

const (
	LevelWarning LogLevel = "warning"
	LevelInfo    LogLevel = "info"
	LevelDebug   LogLevel = "debug"
	LevelTrace   LogLevel = "trace"
	LevelAll     LogLevel = "all"
)

var verbosity = map[LogLevel]int{LevelWarning: -1, LevelInfo: 0, LevelDebug: 4, LevelTrace: 6, LevelAll: 108}

// LogFormat is accepted and ignored: funcr writes one key=value line per record.
type LogFormat string

const (
	FormatJSON LogFormat = "json"
	FormatCLI  LogFormat = "cli"
)

// LogSpec is what ValidateAndSetLogLevelAndFormatGlobally takes.
type LogSpec struct {
	Level  LogLevel
	Format LogFormat
}

var current atomic.Int32

func sink() logr.Logger {
	return funcr.New(func(prefix, args string) {
		fmt.Fprintln(os.Stderr, prefix, args)
	}, funcr.Options{Verbosity: int(current.Load())})
}

// Logger is the subset of monis.app/mlog's Logger the webhook calls.
type Logger struct{ l logr.Logger }

func New() Logger                                       { return Logger{sink()} }
func (g Logger) WithName(name string) Logger            { return Logger{g.l.WithName(name)} }
func (g Logger) WithValues(kv ...any) Logger            { return Logger{g.l.WithValues(kv...)} }
func (g Logger) Info(msg string, kv ...any)             { g.l.Info(msg, kv...) }
func (g Logger) Warning(msg string, kv ...any)          { g.l.Info(msg, append(kv, "warning", true)...) }
func (g Logger) Debug(msg string, kv ...any)            { g.l.V(verbosity[LevelDebug]).Info(msg, kv...) }
func (g Logger) Trace(msg string, kv ...any)            { g.l.V(verbosity[LevelTrace]).Info(msg, kv...) }
func (g Logger) Error(msg string, err error, kv ...any) { g.l.Error(err, msg, kv...) }

func WithName(name string) Logger            { return New().WithName(name) }
func WithValues(kv ...any) Logger            { return New().WithValues(kv...) }
func Info(msg string, kv ...any)             { New().Info(msg, kv...) }
func Warning(msg string, kv ...any)          { New().Warning(msg, kv...) }
func Debug(msg string, kv ...any)            { New().Debug(msg, kv...) }
func Error(msg string, err error, kv ...any) { New().Error(msg, err, kv...) }
func Logr() logr.Logger                      { return sink() }
func Setup() func()                          { return func() {} }
func Enabled(level LogLevel) bool            { return int(current.Load()) >= verbosity[level] }

// Fatal logs err and exits, as monis.app/mlog's does.
func Fatal(err error, kv ...any) {
	New().Error("fatal", err, kv...)
	os.Exit(1)
}

// ValidateAndSetLogLevelAndFormatGlobally sets the verbosity; an unknown level is an error.
func ValidateAndSetLogLevelAndFormatGlobally(_ context.Context, spec LogSpec) error {
	level := spec.Level
	if level == "" {
		level = LevelInfo
	}
	v, ok := verbosity[level]
	if !ok {
		return fmt.Errorf("unknown log level %q", spec.Level)
	}
	current.Store(int32(v))
	return nil
}
