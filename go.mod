module github.com/granaryio/granary

go 1.26

require (
	github.com/jonboulle/clockwork v0.5.0 // indirect
	go.uber.org/goleak v1.3.0 // indirect
	go.uber.org/multierr v1.10.0 // indirect
	go.uber.org/zap v1.28.0 // indirect
)
