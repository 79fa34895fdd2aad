package main

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"net"
	"os"
	"os/exec"
	"slices"
	"strconv"
	"strings"
	"time"

	"go.yaml.in/yaml/v3"
)

// runner runs a command and returns its standard output. An error names
// the command and carries the start of its standard error.
type runner interface {
	run(ctx context.Context, env []string, name string, args ...string) (string, error)
}

// execRunner runs commands on this machine.
type execRunner struct{}

// maxStderr is how much of a failed command's standard error its error
// quotes.
const maxStderr = 4 << 10

func (execRunner) run(ctx context.Context, env []string, name string, args ...string) (string, error) {
	cmd := exec.CommandContext(ctx, name, args...)
	cmd.Env = env
	var stdout, stderr bytes.Buffer
	cmd.Stdout, cmd.Stderr = &stdout, &stderr
	if err := cmd.Run(); err != nil {
		msg := strings.TrimSpace(stderr.String())
		if len(msg) > maxStderr {
			msg = msg[len(msg)-maxStderr:]
		}
		return stdout.String(), fmt.Errorf("%s %s: %w: %s", name, strings.Join(args, " "), err, msg)
	}
	return stdout.String(), nil
}

// compose drives one compose project of one file, through docker compose
// or docker-compose, whichever the machine has.
type compose struct {
	r       runner
	command []string // "docker", "compose" or "docker-compose"
	file    string
	project string
	env     []string // the environment of every command: the caller's, plus the file's variables
}

// detectCompose returns the compose command this machine has: the
// Docker CLI plugin when it answers, else the standalone docker-compose.
func detectCompose(ctx context.Context, r runner, env []string) ([]string, error) {
	if _, err := r.run(ctx, env, "docker", "compose", "version"); err == nil {
		return []string{"docker", "compose"}, nil
	}
	if _, err := r.run(ctx, env, "docker-compose", "version"); err == nil {
		return []string{"docker-compose"}, nil
	}
	return nil, errors.New("neither docker compose nor docker-compose answers: install one of them")
}

func (c *compose) do(ctx context.Context, args ...string) (string, error) {
	all := append(append([]string(nil), c.command[1:]...), "-f", c.file, "-p", c.project)
	return c.r.run(ctx, c.env, c.command[0], append(all, args...)...)
}

// up creates and starts the project's services, detached.
func (c *compose) up(ctx context.Context) error {
	_, err := c.do(ctx, "up", "-d", "--no-build")
	return err
}

// down stops and removes the project's containers, network and volumes,
// giving each container grace to stop.
func (c *compose) down(ctx context.Context, grace time.Duration) error {
	_, err := c.do(ctx, "down", "-v", "--remove-orphans", "-t", strconv.Itoa(int(grace.Seconds())))
	return err
}

// container returns the ID of service's container.
func (c *compose) container(ctx context.Context, service string) (string, error) {
	out, err := c.do(ctx, "ps", "-q", service)
	if err != nil {
		return "", err
	}
	id := strings.TrimSpace(out)
	if id == "" || strings.ContainsAny(id, " \n") {
		return "", fmt.Errorf("compose project %s: want one container of service %s, have %q", c.project, service, id)
	}
	return id, nil
}

// port returns the host address service's container port is published
// at, host:port; an address published on every interface is reached at
// the loopback address.
func (c *compose) port(ctx context.Context, service string, containerPort int) (string, error) {
	out, err := c.do(ctx, "port", service, strconv.Itoa(containerPort))
	if err != nil {
		return "", err
	}
	return parsePort(out)
}

// parsePort reads compose port's answer, host:port on its first line.
func parsePort(out string) (string, error) {
	line, _, _ := strings.Cut(strings.TrimSpace(out), "\n")
	host, port, err := net.SplitHostPort(strings.TrimSpace(line))
	if err != nil || port == "" || port == "0" {
		return "", fmt.Errorf("compose port: %q is not a published host:port", out)
	}
	if ip := net.ParseIP(host); host == "" || ip != nil && ip.IsUnspecified() {
		host = "127.0.0.1"
	}
	return net.JoinHostPort(host, port), nil
}

// logs returns the last lines of every service's logs.
func (c *compose) logs(ctx context.Context, tail int) (string, error) {
	return c.do(ctx, "logs", "--no-color", "--tail", strconv.Itoa(tail))
}

// dockerCLI runs docker commands on containers.
type dockerCLI struct {
	r   runner
	env []string
}

func (d dockerCLI) do(ctx context.Context, args ...string) (string, error) {
	return d.r.run(ctx, d.env, "docker", args...)
}

// kill sends SIGKILL to the container.
func (d dockerCLI) kill(ctx context.Context, id string) error {
	_, err := d.do(ctx, "kill", id)
	return err
}

// start starts a stopped container.
func (d dockerCLI) start(ctx context.Context, id string) error {
	_, err := d.do(ctx, "start", id)
	return err
}

// restart stops the container (SIGTERM, then SIGKILL after grace) and
// starts it again.
func (d dockerCLI) restart(ctx context.Context, id string, grace time.Duration) error {
	_, err := d.do(ctx, "restart", "-t", strconv.Itoa(int(grace.Seconds())), id)
	return err
}

// disconnect takes the container off network.
func (d dockerCLI) disconnect(ctx context.Context, network, id string) error {
	_, err := d.do(ctx, "network", "disconnect", network, id)
	return err
}

// connect puts the container back on network as it was there: under
// its DNS aliases (compose's service name among them) and at its address
// ep.IP when the network allows choosing (its subnet is configured),
// else wherever the network's allocator puts it: the lowest free address,
// which is the one the container left when no other took it meanwhile.
func (d dockerCLI) connect(ctx context.Context, network, id string, ep endpoint) error {
	args := []string{"network", "connect"}
	for _, a := range ep.Aliases {
		args = append(args, "--alias", a)
	}
	if ep.IP != "" {
		withIP := append(slices.Clone(args), "--ip", ep.IP, network, id)
		_, err := d.do(ctx, withIP...)
		if err == nil || !strings.Contains(err.Error(), "user configured subnets") {
			return err
		}
	}
	_, err := d.do(ctx, append(args, network, id)...)
	return err
}

// containerState is what the run reads of docker inspect.
type containerState struct {
	Networks     map[string]endpoint // by network name
	RestartCount int
	Running      bool
}

// endpoint is a container's place on a network.
type endpoint struct {
	IP      string   // its IPv4 address
	Aliases []string // the names it answers to on the network's DNS
}

// inspect reads the container's networks and state.
func (d dockerCLI) inspect(ctx context.Context, id string) (containerState, error) {
	out, err := d.do(ctx, "inspect", id)
	if err != nil {
		return containerState{}, err
	}
	return parseInspect(out)
}

// parseInspect reads docker inspect's JSON for one container.
func parseInspect(out string) (containerState, error) {
	var raw []struct {
		RestartCount int
		State        struct{ Running bool }
		// NetworkSettings.Networks maps names to endpoint settings.
		NetworkSettings struct {
			Networks map[string]struct {
				IPAddress string
				Aliases   []string
			}
		}
	}
	if err := json.Unmarshal([]byte(out), &raw); err != nil {
		return containerState{}, fmt.Errorf("docker inspect: %w", err)
	}
	if len(raw) != 1 {
		return containerState{}, fmt.Errorf("docker inspect: %d containers, want 1", len(raw))
	}
	s := containerState{Networks: map[string]endpoint{}, RestartCount: raw[0].RestartCount, Running: raw[0].State.Running}
	for name, n := range raw[0].NetworkSettings.Networks {
		s.Networks[name] = endpoint{IP: n.IPAddress, Aliases: n.Aliases}
	}
	return s, nil
}

// protectionEnv starts the names of the silos' overload settings, which
// the report quotes from the compose file.
var protectionEnv = []string{"GRANARY_LOAD_SHEDDING_", "GRANARY_QUEUE_LIMITS_", "GRANARY_MEMORY_COLLECTION_", "GRANARY_SHUTDOWN_CLOSE_TIMEOUT", "GOMEMLIMIT"}

// composeProtection returns the overload settings of the first silo's
// environment in the compose file at path, NAME=value, sorted.
func composeProtection(path string) ([]string, error) {
	data, err := os.ReadFile(path)
	if err != nil {
		return nil, err
	}
	return parseProtection(data)
}

func parseProtection(data []byte) ([]string, error) {
	var f struct {
		Services map[string]struct {
			Environment map[string]string `yaml:"environment"`
		} `yaml:"services"`
	}
	if err := yaml.Unmarshal(data, &f); err != nil {
		return nil, fmt.Errorf("the compose file: %w", err)
	}
	svc, ok := f.Services[silos[0]]
	if !ok {
		return nil, fmt.Errorf("the compose file has no service %s", silos[0])
	}
	var out []string
	for name, v := range svc.Environment {
		for _, prefix := range protectionEnv {
			if strings.HasPrefix(name, prefix) {
				out = append(out, name+"="+v)
			}
		}
	}
	slices.Sort(out)
	return out, nil
}
