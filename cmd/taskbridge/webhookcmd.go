package main

// `taskbridge webhook ...`: the push webhooks of a taskbridge server
// (its io.taskbridge/webhooks/* methods): register one, list them, delete
// one, and show one's deliveries.

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	"strings"

	"github.com/taskbridge/taskbridge/client"
	"github.com/taskbridge/taskbridge/mcptask"
)

// parseWebhook checks `webhook SUBCOMMAND ...`.
func parseWebhook(args []string) (*plan, error) {
	if len(args) == 0 {
		return nil, usagef("webhook needs a subcommand: add, list, rm or deliveries")
	}
	sub, args := args[0], args[1:]
	name := "webhook " + sub
	fs := flag.NewFlagSet(name, flag.ContinueOnError)
	fs.SetOutput(io.Discard)
	switch sub {
	case "add":
		events := fs.String("events", "", "comma-separated: terminal, input_required, paused, step (default terminal,input_required,paused)")
		task := fs.String("task", "", "watch this task only (default: every task of yours)")
		owner := fs.String("owner", "", "an administrator's webhook for another owner's tasks (* for every owner's)")
		secret := fs.String("secret", "", "the signing secret, whsec_... (default: the server makes one)")
		pos, err := parseFlags(fs, name, args)
		if err != nil {
			return nil, err
		}
		if len(pos) != 1 {
			return nil, usagef("webhook add needs one URL")
		}
		opts := &client.WebhookOptions{TaskID: *task, Owner: *owner, Secret: *secret}
		for _, e := range strings.FieldsFunc(*events, func(r rune) bool { return r == ',' || r == ' ' }) {
			if !mcptask.WebhookEvent(e).Valid() {
				return nil, usagef("webhook add: unknown event %q (terminal, input_required, paused, step)", e)
			}
			opts.Events = append(opts.Events, mcptask.WebhookEvent(e))
		}
		return &plan{run: func(ctx context.Context, cmd *command) error { return cmd.webhookAdd(ctx, pos[0], opts) }}, nil
	case "list":
		task := fs.String("task", "", "only the webhooks of this task")
		pos, err := parseFlags(fs, name, args)
		if err != nil {
			return nil, err
		}
		if len(pos) > 0 {
			return nil, usagef("webhook list takes no arguments, not %q", pos[0])
		}
		return &plan{run: func(ctx context.Context, cmd *command) error { return cmd.webhookList(ctx, *task) }}, nil
	case "rm", "deliveries":
		pos, err := parseFlags(fs, name, args)
		if err != nil {
			return nil, err
		}
		if len(pos) != 1 {
			return nil, usagef("webhook %s needs one webhook id", sub)
		}
		if sub == "rm" {
			return &plan{run: func(ctx context.Context, cmd *command) error { return cmd.webhookRm(ctx, pos[0]) }}, nil
		}
		return &plan{run: func(ctx context.Context, cmd *command) error { return cmd.webhookDeliveries(ctx, pos[0]) }}, nil
	}
	return nil, usagef("unknown webhook subcommand %q (add, list, rm, deliveries)", sub)
}

// webhookError words a server without push.
func webhookError(err error) error {
	if errors.Is(err, client.ErrCapability) {
		return fmt.Errorf("the server has no push webhooks (a taskbridge server serves io.taskbridge/webhooks/*): %w", err)
	}
	return err
}

func (cmd *command) webhookAdd(ctx context.Context, url string, opts *client.WebhookOptions) error {
	wh, secret, err := cmd.c.RegisterWebhook(ctx, url, opts)
	if err != nil {
		return webhookError(err)
	}
	if cmd.out.json {
		return cmd.out.line(map[string]any{"webhook": wh, "secret": secret})
	}
	fmt.Fprintf(cmd.out.w, "webhook:  %s\nurl:      %s\nevents:   %s\n", wh.WebhookID, wh.URL, joinWebhookEvents(wh.Events))
	if wh.TaskID != "" {
		fmt.Fprintf(cmd.out.w, "task:     %s\n", wh.TaskID)
	}
	fmt.Fprintf(cmd.out.w, "secret:   %s\n", secret)
	fmt.Fprintln(cmd.out.w, "Keep the secret: the server shows it this once. Deliveries carry webhook-id,")
	fmt.Fprintln(cmd.out.w, "webhook-timestamp and webhook-signature headers; verify them with it (README, \"Push\").")
	return nil
}

func (cmd *command) webhookList(ctx context.Context, task string) error {
	hooks, err := cmd.c.Webhooks(ctx, task)
	if err != nil {
		return webhookError(err)
	}
	for _, wh := range hooks {
		if cmd.out.json {
			if err := cmd.out.line(wh); err != nil {
				return err
			}
			continue
		}
		watch := "task " + wh.TaskID
		switch {
		case wh.TaskID != "":
		case wh.Owner == "*":
			watch = "every owner's tasks"
		case wh.Owner != "":
			watch = wh.Owner + "'s tasks"
		default:
			watch = "your tasks"
		}
		line := fmt.Sprintf("%s  %s  %s  (%s)", wh.WebhookID, wh.URL, watch, joinWebhookEvents(wh.Events))
		if wh.Static {
			line += "  [configuration]"
		}
		if wh.Failures > 0 {
			line += fmt.Sprintf("\n    %d failed deliveries; last at %s: %s", wh.Failures, wh.LastFailureAt, wh.LastError)
		}
		fmt.Fprintln(cmd.out.w, line)
	}
	if len(hooks) == 0 && !cmd.out.json {
		fmt.Fprintln(cmd.out.w, "no webhooks")
	}
	return nil
}

func (cmd *command) webhookRm(ctx context.Context, id string) error {
	if err := cmd.c.DeleteWebhook(ctx, id); err != nil {
		return webhookError(err)
	}
	if cmd.out.json {
		return cmd.out.line(map[string]any{"webhookId": id, "deleted": true})
	}
	fmt.Fprintf(cmd.out.w, "deleted webhook %s\n", id)
	return nil
}

func (cmd *command) webhookDeliveries(ctx context.Context, id string) error {
	n := 0
	for d, err := range cmd.c.WebhookDeliveries(ctx, id) {
		if err != nil {
			return webhookError(err)
		}
		n++
		if cmd.out.json {
			if err := cmd.out.line(d); err != nil {
				return err
			}
			continue
		}
		line := fmt.Sprintf("%s  %-9s  task %s #%d %-14s  %d attempts", d.DeliveryID, d.Status, d.TaskID, d.Seq, d.Type, d.Attempts)
		if d.NextAttemptAt != "" {
			line += ", next at " + d.NextAttemptAt
		}
		if d.LastError != "" {
			line += "\n    " + d.LastError
		}
		fmt.Fprintln(cmd.out.w, line)
	}
	if n == 0 && !cmd.out.json {
		fmt.Fprintln(cmd.out.w, "no deliveries")
	}
	return nil
}

func joinWebhookEvents(events []mcptask.WebhookEvent) string {
	s := make([]string, len(events))
	for i, e := range events {
		s[i] = string(e)
	}
	return strings.Join(s, ",")
}
