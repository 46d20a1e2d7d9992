package client

import (
	"context"
	"encoding/json"
	"fmt"
	"slices"

	"github.com/modelcontextprotocol/go-sdk/mcp"
	"github.com/taskbridge/taskbridge/mcptask"
)

func (c *Client) defaultCapabilities() *mcp.ClientCapabilities {
	if c.opts.Capabilities != nil {
		caps := *c.opts.Capabilities
		return &caps
	}
	caps := &mcp.ClientCapabilities{}
	r := c.opts.Receiver
	if c.opts.InputHandler != nil || (r != nil && r.Elicitation != nil) {
		caps.Elicitation = &mcp.ElicitationCapabilities{Form: &mcp.FormElicitationCapabilities{}}
	}
	if c.opts.InputHandler != nil || (r != nil && r.Sampling != nil) {
		caps.Sampling = &mcp.SamplingCapabilities{}
	}
	return caps
}

// capabilitiesMap encodes the client capabilities as a JSON object,
// dropping the always-present empty "roots" of mcp.ClientCapabilities when
// roots were not asked for.
func (c *Client) capabilitiesMap() map[string]any {
	m := map[string]any{}
	b, err := json.Marshal(c.caps)
	if err == nil {
		_ = json.Unmarshal(b, &m)
	}
	if c.caps.RootsV2 == nil && !c.caps.Roots.ListChanged {
		delete(m, "roots")
	} else if c.caps.RootsV2 != nil {
		m["roots"] = c.caps.RootsV2
	}
	return m
}

func (c *Client) handshake(ctx context.Context) error {
	switch c.opts.Dialect {
	case mcptask.Core:
		return c.initialize(ctx)
	case mcptask.Extension:
		res, err := c.discover(ctx)
		if err != nil {
			return fmt.Errorf("client: server/discover: %w", err)
		}
		c.useDiscovery(res)
		return nil
	case Auto:
		res, err := c.discover(ctx)
		if err == nil && res.extension {
			c.useDiscovery(res)
			return nil
		}
		if err != nil {
			if ctx.Err() != nil {
				return ctx.Err()
			}
			c.log.Debug("server/discover failed; falling back to initialize", "error", err)
		}
		ierr := c.initialize(ctx)
		if ierr != nil && err == nil {
			// The server speaks 2026-07-28 without the tasks extension and
			// will not also initialize on this connection (a go-sdk server
			// treats server/discover as the session's start): stay at
			// 2026-07-28, with no task support.
			c.log.Debug("initialize after server/discover failed; staying at "+mcptask.ExtensionVersion, "error", ierr)
			c.useDiscovery(res)
			return nil
		}
		return ierr
	}
	return fmt.Errorf("client: unknown dialect %d", c.opts.Dialect)
}

type discovery struct {
	caps         json.RawMessage
	serverInfo   *mcp.Implementation
	instructions string
	extension    bool
}

func (c *Client) discover(ctx context.Context) (*discovery, error) {
	dctx, cancel := context.WithTimeout(ctx, defaultDiscoverWait)
	defer cancel()
	var raw json.RawMessage
	params := map[string]any{"_meta": c.extMeta()}
	if err := c.conn.Call(dctx, mcptask.MethodDiscover, params, &raw); err != nil {
		return nil, rpcError(mcptask.MethodDiscover, err)
	}
	var res struct {
		SupportedVersions []string                   `json:"supportedVersions"`
		Capabilities      json.RawMessage            `json:"capabilities"`
		Instructions      string                     `json:"instructions"`
		Meta              map[string]json.RawMessage `json:"_meta"`
	}
	if err := json.Unmarshal(raw, &res); err != nil {
		return nil, malformed("server/discover result: %v", err)
	}
	if len(res.SupportedVersions) > 0 && !slices.Contains(res.SupportedVersions, mcptask.ExtensionVersion) {
		return nil, fmt.Errorf("server/discover: the server supports %v, not %s", res.SupportedVersions, mcptask.ExtensionVersion)
	}
	d := &discovery{caps: res.Capabilities, instructions: res.Instructions}
	if si, ok := res.Meta[mcptask.MetaServerInfo]; ok {
		var impl mcp.Implementation
		if json.Unmarshal(si, &impl) == nil {
			d.serverInfo = &impl
		}
	}
	d.extension = parseSupport(res.Capabilities).Extension
	return d, nil
}

func (c *Client) useDiscovery(d *discovery) {
	c.adopt(mcptask.Extension, mcptask.ExtensionVersion, d.caps, d.serverInfo, d.instructions)
}

// adopt records what the handshake (discovery, or initialize) said of
// the server: the dialect and version spoken, its capabilities, who it
// is, its instructions.
func (c *Client) adopt(d mcptask.Dialect, version string, caps json.RawMessage, info *mcp.Implementation, instructions string) {
	c.dialect = d
	c.protocolVersion = version
	c.support = parseSupport(caps)
	c.serverCaps = decodeServerCaps(caps)
	c.serverInfo = info
	c.instructions = instructions
}

func (c *Client) initialize(ctx context.Context) error {
	caps := c.capabilitiesMap()
	if r := c.opts.Receiver; r != nil {
		requests := map[string]any{}
		if r.Sampling != nil {
			requests["sampling"] = map[string]any{"createMessage": map[string]any{}}
		}
		if r.Elicitation != nil {
			requests["elicitation"] = map[string]any{"create": map[string]any{}}
		}
		caps["tasks"] = map[string]any{"list": map[string]any{}, "cancel": map[string]any{}, "requests": requests}
	}
	params := map[string]any{"protocolVersion": mcptask.CoreVersion, "capabilities": caps, "clientInfo": c.opts.ClientInfo}
	var raw json.RawMessage
	if err := c.conn.Call(ctx, mcptask.MethodInitialize, params, &raw); err != nil {
		return fmt.Errorf("client: initialize: %w", rpcError(mcptask.MethodInitialize, err))
	}
	var res struct {
		ProtocolVersion string              `json:"protocolVersion"`
		Capabilities    json.RawMessage     `json:"capabilities"`
		ServerInfo      *mcp.Implementation `json:"serverInfo"`
		Instructions    string              `json:"instructions"`
	}
	if err := json.Unmarshal(raw, &res); err != nil {
		return fmt.Errorf("client: initialize: %w", malformed("%v", err))
	}
	if res.ProtocolVersion == "" {
		return fmt.Errorf("client: initialize: %w", malformed("no protocolVersion"))
	}
	c.adopt(mcptask.Core, res.ProtocolVersion, res.Capabilities, res.ServerInfo, res.Instructions)
	if vs, ok := c.transport.(interface{ setProtocolVersion(string) }); ok {
		vs.setProtocolVersion(res.ProtocolVersion)
	}
	if err := c.conn.Notify(ctx, mcptask.MethodInitialized, map[string]any{}); err != nil {
		return fmt.Errorf("client: notifications/initialized: %w", err)
	}
	return nil
}

// parseSupport reads the task capabilities of both dialects from a raw
// ServerCapabilities object.
func parseSupport(raw json.RawMessage) Support {
	var caps struct {
		Tasks *struct {
			List     json.RawMessage `json:"list"`
			Cancel   json.RawMessage `json:"cancel"`
			Requests *struct {
				Tools *struct {
					Call json.RawMessage `json:"call"`
				} `json:"tools"`
			} `json:"requests"`
		} `json:"tasks"`
		Extensions map[string]json.RawMessage `json:"extensions"`
	}
	var s Support
	if json.Unmarshal(raw, &caps) != nil {
		return s
	}
	if t := caps.Tasks; t != nil {
		s.Core = true
		s.List = !isAbsent(t.List)
		s.Cancel = !isAbsent(t.Cancel)
		s.ToolsCall = t.Requests != nil && t.Requests.Tools != nil && !isAbsent(t.Requests.Tools.Call)
	}
	if ext, ok := caps.Extensions[mcptask.ExtensionID]; ok && !isAbsent(ext) {
		s.Extension = true
	}
	return s
}

func decodeServerCaps(raw json.RawMessage) *mcp.ServerCapabilities {
	var sc mcp.ServerCapabilities
	if isAbsent(raw) || json.Unmarshal(raw, &sc) != nil {
		return &mcp.ServerCapabilities{}
	}
	return &sc
}
