// The eve browser view (SPEC §14). Written by hand, no build step, no dependency: it talks
// only to the JSON routes under /eve/v1, so it can do nothing the API does not allow. Text
// from sessions (model replies, tool output, user messages) only ever becomes DOM text nodes
// (textContent), never HTML: Markdown is parsed here into elements, so no model reply can
// inject markup or script.
"use strict";

(() => {
  const API = "/eve/v1";
  const TOKEN_KEY = "eve.token"; // sessionStorage: the token lives as long as the tab
  const LOGIN_KEY = "eve.login"; // sessionStorage: a login under way (PKCE verifier, state)
  const THEME_KEY = "eve.theme"; // localStorage: light | dark | (absent: the system's)
  const POLL_MS = 1000; // the session list and the dev reload state are polled
  const FINAL = new Set(["completed", "failed", "cancelled"]);
  const STATUSES = ["running", "waiting", "parked", "interrupted", "completed", "failed", "cancelled"];

  // -- small DOM helpers ----------------------------------------------------------------

  /** An element: el("a", {href: "#", class: "x", onclick: f}, "text", child...). */
  function el(tag, attrs, ...children) {
    const node = document.createElement(tag);
    for (const [key, value] of Object.entries(attrs || {})) {
      if (value === undefined || value === null || value === false) continue;
      if (key.startsWith("on")) node.addEventListener(key.slice(2), value);
      else if (key === "class") node.className = value;
      else if (key === "text") node.textContent = value;
      else if (value === true) node.setAttribute(key, "");
      else node.setAttribute(key, String(value));
    }
    for (const child of children) append(node, child);
    return node;
  }

  function append(node, child) {
    if (child === undefined || child === null || child === false) return;
    if (Array.isArray(child)) child.forEach((c) => append(node, c));
    else node.append(child instanceof Node ? child : document.createTextNode(String(child)));
  }

  const $ = (selector, root) => (root || document).querySelector(selector);

  /** Run `render` (which rebuilds `box`), keeping the keyboard focus on the link it was on. */
  function keepFocus(box, render) {
    const focused = document.activeElement;
    const href = focused && box.contains(focused) ? focused.getAttribute("href") : null;
    render();
    if (href) {
      const again = [...box.querySelectorAll("a[href]")].find((a) => a.getAttribute("href") === href);
      if (again) again.focus();
    }
  }

  function toast(message, bad) {
    const box = $("#toast");
    box.textContent = message;
    box.className = bad ? "toast bad" : "toast";
    box.hidden = false;
    clearTimeout(toast.timer);
    toast.timer = setTimeout(() => { box.hidden = true; }, bad ? 6000 : 2500);
  }

  const sleep = (ms) => new Promise((resolve) => setTimeout(resolve, ms));

  // -- the API --------------------------------------------------------------------------

  class ApiError extends Error {
    constructor(status, message) { super(message); this.status = status; }
  }

  function headers(extra) {
    const out = { accept: "application/json", ...extra };
    const token = sessionStorage.getItem(TOKEN_KEY);
    if (token) out.authorization = "Bearer " + token;
    return out;
  }

  /** A JSON call; a 401 asks for the token (and rejects), other errors reject with the
      server's one-line message. */
  async function api(method, path, body) {
    const init = { method, headers: headers() };
    if (method === "POST") {
      init.headers["content-type"] = "application/json";
      init.body = JSON.stringify(body || {});
    }
    let response;
    try {
      response = await fetch(API + path, init);
    } catch (err) {
      throw new ApiError(0, "the server cannot be reached");
    }
    const data = await response.json().catch(() => ({}));
    if (response.status === 401) {
      askToken(data.error ? data.error.message : "this server needs a token");
      throw new ApiError(401, "a token is needed");
    }
    if (!response.ok) {
      const message = data.error ? data.error.message : response.status + " " + response.statusText;
      throw new ApiError(response.status, message);
    }
    return data;
  }

  // -- the token ------------------------------------------------------------------------

  let asking = false;

  function askToken(reason) {
    if (asking) {
      const why = $("#token-why");
      if (why) why.textContent = reason;
      return;
    }
    asking = true;
    stopView();
    const input = el("input", {
      id: "token", type: "password", autocomplete: "off", required: true,
      "aria-describedby": "token-why", placeholder: "bearer token",
    });
    const login = el("p", { id: "login" });
    const form = el("form", { class: "card token", onsubmit: (event) => {
      event.preventDefault();
      sessionStorage.setItem(TOKEN_KEY, input.value.trim());
      asking = false;
      route();
    } },
      el("h1", { text: "This server needs a token" }),
      el("p", { id: "token-why", class: "muted", text: reason }),
      login,
      el("label", { for: "token", text: "Token (kept only in this tab)" }),
      input,
      el("button", { type: "submit", class: "primary", text: "Open" }),
    );
    show(form);
    input.focus();
    offerLogin(login);
  }

  // -- logging in with the server's issuer (OpenID Connect: authorization code + PKCE) ----
  // The code verifier and state live in this tab's sessionStorage for the round trip; the
  // token the issuer gives back is kept as a typed one is (this tab only); nothing goes to
  // localStorage or a cookie.

  const b64url = (bytes) => btoa(String.fromCharCode(...new Uint8Array(bytes)))
    .replace(/\+/g, "-").replace(/\//g, "_").replace(/=+$/, "");
  const randomText = () => b64url(crypto.getRandomValues(new Uint8Array(32)));
  const redirectUri = () => location.origin + "/";

  async function loginSettings() {
    const response = await fetch(API + "/auth", { headers: { accept: "application/json" } });
    return response.ok ? response.json() : { login: "token" };
  }

  async function offerLogin(box) {
    let settings;
    try { settings = await loginSettings(); } catch (err) { return; }
    if (settings.login !== "oidc") return;
    const host = new URL(settings.issuer).host;
    box.append(el("button", { type: "button", class: "primary", id: "oidc-login",
      text: "Log in with " + host, onclick: () => startLogin(settings) }));
  }

  async function startLogin(settings) {
    const verifier = randomText();
    const state = randomText();
    const digest = await crypto.subtle.digest("SHA-256", new TextEncoder().encode(verifier));
    sessionStorage.setItem(LOGIN_KEY, JSON.stringify({ verifier, state, hash: location.hash }));
    const query = new URLSearchParams({
      response_type: "code", client_id: settings.clientId, redirect_uri: redirectUri(),
      scope: settings.scope, state, code_challenge: b64url(digest), code_challenge_method: "S256",
    });
    location.assign(settings.authorizationEndpoint + "?" + query);
  }

  /** Back from the issuer with ?code=…&state=…: trade the code for a token (once). */
  async function finishLogin() {
    const query = new URLSearchParams(location.search);
    if (!query.has("code") && !query.has("error")) return;
    const saved = JSON.parse(sessionStorage.getItem(LOGIN_KEY) || "null");
    sessionStorage.removeItem(LOGIN_KEY);
    history.replaceState(null, "", "/" + ((saved && saved.hash) || ""));  // the code leaves the URL
    if (query.has("error") || !saved || saved.state !== query.get("state")) {
      toast("the login did not complete: " + (query.get("error") || "its state does not match"), true);
      return;
    }
    try {
      const settings = await loginSettings();
      const body = new URLSearchParams({
        grant_type: "authorization_code", code: query.get("code"), redirect_uri: redirectUri(),
        client_id: settings.clientId, code_verifier: saved.verifier,
      });
      const response = await fetch(settings.tokenEndpoint, { method: "POST", body });
      const answer = await response.json();
      if (!response.ok || !answer.access_token) throw new Error(answer.error || response.status);
      sessionStorage.setItem(TOKEN_KEY, answer.access_token);
    } catch (err) {
      toast("the issuer did not give a token: " + err.message, true);
    }
  }

  // -- formatting -----------------------------------------------------------------------

  function ago(iso) {
    const then = Date.parse(iso);
    if (Number.isNaN(then)) return "";
    const s = Math.max(0, (Date.now() - then) / 1000);
    if (s < 60) return "just now";
    for (const [size, unit] of [[86400, "d"], [3600, "h"], [60, "m"]]) {
      if (s >= size) return Math.floor(s / size) + unit + " ago";
    }
    return "";
  }

  function clock(iso) {
    const d = new Date(iso);
    return Number.isNaN(d.getTime()) ? "" : d.toLocaleTimeString();
  }

  function bytes(n) {
    if (typeof n !== "number") return "";
    if (n < 1024) return n + " B";
    if (n < 1 << 20) return (n / 1024).toFixed(1) + " KB";
    return (n / (1 << 20)).toFixed(1) + " MB";
  }

  function ms(value) {
    if (typeof value !== "number") return "";
    return value < 1000 ? value + " ms" : (value / 1000).toFixed(1) + " s";
  }

  function json(value) {
    if (typeof value === "string") return value;
    try { return JSON.stringify(value, null, 2); } catch (err) { return String(value); }
  }

  function oneLine(value, limit) {
    const text = (typeof value === "string" ? value : JSON.stringify(value) || "").replace(/\s+/g, " ").trim();
    return text.length > limit ? text.slice(0, limit - 1) + "…" : text;
  }

  function call(name, args) {
    if (!args || typeof args !== "object") return name + "()";
    const parts = Object.entries(args).map(([k, v]) => k + "=" + JSON.stringify(v));
    return oneLine(name + "(" + parts.join(", ") + ")", 80);
  }

  /** A tool result's word: its status (completed | failed | rejected), failed for an error. */
  function outcome(status, isError) {
    return (status || "completed") === "completed" && isError ? "failed" : status || "completed";
  }

  function badge(status, parkedOn) {
    const word = status || "?";
    const label = word === "parked" && parkedOn ? "parked: " + parkedOn : word;
    return el("span", { class: "badge s-" + word, text: label });
  }

  // -- Markdown, to elements only -------------------------------------------------------

  const SAFE_SCHEMES = new Set(["http:", "https:", "mailto:"]);

  function safeUrl(raw) {
    try {
      const url = new URL(raw, location.href);
      return SAFE_SCHEMES.has(url.protocol) ? url.href : null;
    } catch (err) {
      return null;
    }
  }

  function link(text, href) {
    const url = safeUrl(href);
    if (!url) return [text];
    return [el("a", { href: url, target: "_blank", rel: "noopener noreferrer nofollow" }, text)];
  }

  // Inline spans, leftmost first: code, links, autolinks, bold, italics, strike.
  const INLINE = [
    [/`([^`\n]+)`/, (m) => [el("code", { text: m[1] })]],
    [/\[([^\]\n]+)\]\(([^)\s]+)\)/, (m) => link(inline(m[1]), m[2])],
    [/<(https?:\/\/[^>\s]+)>/, (m) => link(m[1], m[1])],
    [/https?:\/\/[^\s<>()]+[^\s<>().,;:!?'"]/, (m) => link(m[0], m[0])],
    [/\*\*(?=\S)([\s\S]*?\S)\*\*|__(?=\S)([\s\S]*?\S)__/, (m) => [el("strong", {}, inline(m[1] || m[2]))]],
    [/\*(?=\S)([^*]*?\S)\*|\b_(?=\S)([^_]*?\S)_\b/, (m) => [el("em", {}, inline(m[1] || m[2]))]],
    [/~~(?=\S)([\s\S]*?\S)~~/, (m) => [el("del", {}, inline(m[1]))]],
  ];

  function inline(text) {
    const out = [];
    let rest = text;
    while (rest) {
      let best = null;
      for (const [pattern, make] of INLINE) {
        const m = pattern.exec(rest);
        if (m && (best === null || m.index < best.m.index)) best = { m, make };
      }
      if (!best) { out.push(...breaks(rest)); break; }
      if (best.m.index) out.push(...breaks(rest.slice(0, best.m.index)));
      out.push(...best.make(best.m));
      rest = rest.slice(best.m.index + best.m[0].length);
    }
    return out;
  }

  function breaks(text) {
    const out = [];
    text.split("\n").forEach((line, i) => {
      if (i) out.push(el("br"));
      if (line) out.push(line);
    });
    return out;
  }

  const FENCE = /^\s*(```+|~~~+)\s*([\w+-]*)/;
  const HEADING = /^(#{1,6})\s+(.*?)\s*#*\s*$/;
  const RULE = /^\s*([-*_])(\s*\1){2,}\s*$/;
  const ITEM = /^(\s*)([-*+]|\d{1,9}[.)])\s+(.*)$/;
  const QUOTE = /^\s*>\s?(.*)$/;
  const TABLE_SEP = /^\s*\|?\s*:?-+:?\s*(\|\s*:?-+:?\s*)*\|?\s*$/;

  function isBlockStart(line, next) {
    return FENCE.test(line) || HEADING.test(line) || RULE.test(line) || ITEM.test(line) ||
      QUOTE.test(line) || (line.includes("|") && next !== undefined && TABLE_SEP.test(next));
  }

  /** Markdown text as a list of block elements. */
  function markdown(text) {
    const lines = String(text).replace(/\r\n?/g, "\n").split("\n");
    const out = [];
    let i = 0;
    while (i < lines.length) {
      const line = lines[i];
      let m;
      if (!line.trim()) { i++; continue; }
      if ((m = FENCE.exec(line))) {
        const body = [];
        i++;
        while (i < lines.length && !lines[i].trim().startsWith(m[1])) body.push(lines[i++]);
        i++;
        out.push(el("pre", {}, el("code", { class: m[2] ? "lang-" + m[2] : null, text: body.join("\n") })));
      } else if ((m = HEADING.exec(line))) {
        out.push(el("h" + Math.min(6, m[1].length + 2), { class: "md-h" }, inline(m[2])));
        i++;
      } else if (RULE.test(line)) {
        out.push(el("hr"));
        i++;
      } else if (QUOTE.test(line)) {
        const body = [];
        while (i < lines.length && (m = QUOTE.exec(lines[i]))) { body.push(m[1]); i++; }
        out.push(el("blockquote", {}, markdown(body.join("\n"))));
      } else if (ITEM.test(line)) {
        i = list(lines, i, out);
      } else if (line.includes("|") && TABLE_SEP.test(lines[i + 1] || "")) {
        i = table(lines, i, out);
      } else {
        const body = [line];
        i++;
        while (i < lines.length && lines[i].trim() && !isBlockStart(lines[i], lines[i + 1])) body.push(lines[i++]);
        out.push(el("p", {}, inline(body.join("\n"))));
      }
    }
    return out;
  }

  function list(lines, i, out) {
    const first = ITEM.exec(lines[i]);
    const indent = first[1].length;
    const ordered = /\d/.test(first[2]);
    const node = el(ordered ? "ol" : "ul");
    if (ordered && parseInt(first[2], 10) !== 1) node.setAttribute("start", parseInt(first[2], 10));
    let item = null;
    while (i < lines.length) {
      const line = lines[i];
      const m = ITEM.exec(line);
      if (m && m[1].length === indent && /\d/.test(m[2]) === ordered) {
        if (item) node.append(el("li", {}, markdown(item.join("\n"))));
        item = [m[3]];
      } else if (line.trim() && (line.search(/\S/) > indent || (!isBlockStart(line) && !m))) {
        item.push(line.slice(Math.min(line.search(/\S/), indent + 2)));
      } else if (!line.trim() && i + 1 < lines.length && lines[i + 1].search(/\S/) > indent) {
        item.push("");
      } else {
        break;
      }
      i++;
    }
    if (item) node.append(el("li", {}, markdown(item.join("\n"))));
    out.push(node);
    return i;
  }

  function cells(line) {
    return line.trim().replace(/^\|/, "").replace(/\|$/, "").split("|").map((c) => c.trim());
  }

  function table(lines, i, out) {
    const head = cells(lines[i]);
    i += 2;
    const rows = [];
    while (i < lines.length && lines[i].includes("|") && lines[i].trim()) rows.push(cells(lines[i++]));
    out.push(el("div", { class: "md-table" }, el("table", {},
      el("thead", {}, el("tr", {}, head.map((c) => el("th", {}, inline(c))))),
      el("tbody", {}, rows.map((r) => el("tr", {}, head.map((_, k) => el("td", {}, inline(r[k] || "")))))),
    )));
    return i;
  }

  // -- a session as the server folds it (GET /session/{id}: the one fold of its events) ------

  function request(p) {
    if (p.kind === "question") return "an answer: " + (p.question || (p.arguments && p.arguments.question) || "");
    if (p.kind === "outcome") return "what became of " + call(p.tool || "?", p.arguments) + " (outcome unknown)";
    return "approval of " + call(p.tool || "?", p.arguments);
  }

  /** The model call and the tool calls of a step of the view, as `eve inspect` lists them. */
  function stepActions(step) {
    const model = step.modelMs !== null && step.modelMs !== undefined
      ? [{ kind: "model", status: "completed", text: step.text || "", durationMs: step.modelMs }] : [];
    return model.concat((step.actions || []).map((a) => Object.assign({ kind: "tool" }, a)));
  }

  /** What a checkpoint added since the previous one, one line each (as `eve inspect --step`). */
  function stepChanges(turn, step) {
    const lines = [];
    const user = (by) => (who(by) ? "+ user " + who(by) + ": " : "+ user: ");
    if (step === turn.steps[0] && turn.input !== null) lines.push(user(turn.by) + turn.input);
    for (const s of turn.steered || []) if (s.atStep === turn.steps.indexOf(step)) lines.push(user(s.by) + s.text);
    if (step.modelMs !== null && step.modelMs !== undefined) lines.push(step.text ? "+ assistant: " + step.text : "+ assistant: (tool calls only)");
    if ((step.actions || []).length) lines.push("+ tool calls: " + step.actions.map((a) => call(a.name, a.arguments)).join(", "));
    for (const a of step.actions || []) {
      if (a.waitedFor) lines.push("+ waiting for " + request({ kind: a.waitedFor, tool: a.name, arguments: a.arguments }));
    }
    // A parked call is answered and ends in a later step: listed where its events are.
    for (const s of turn.steps) {
      for (const a of s.actions || []) {
        if (a.answer && (a.answeredIn ?? s.index) === step.index) lines.push("+ " + resolved(a.answer, 160));
        const ended = a.status !== "requested" && a.status !== "waiting";
        if (ended && (a.endedIn ?? s.index) === step.index) lines.push("+ result " + a.name + " [" + (a.status || "completed") + "]: " + oneLine(a.output !== undefined ? a.output : "", 2000));
      }
    }
    if (step.status === "completed") lines.push("= step completed" + (step.usage ? " usage " + oneLine(step.usage, 120) : ""));
    if (step.status === "failed") lines.push("= failed: " + errorText(step.error));
    return lines;
  }

  function errorText(error) {
    return oneLine((error && error.message) || error || "", 300);
  }

  const OUTCOME_WORDS = { rerun: "run again", failed: "treated as failed" };

  /** Who a recorded principal (`by`: {subject, tenant?}) is: "alice" or "alice@acme". */
  function who(by) {
    if (!by || !by.subject) return null;
    return by.tenant ? by.subject + "@" + by.tenant : by.subject;
  }

  /** What an answer to an input request said, in a few words (as `eve chat` prints it), and
      who gave it when the server recorded that. */
  function resolved(event, limit) {
    const by = who(event.by) ? " (by " + who(event.by) + ")" : "";
    if ("answer" in event) return "answered: " + oneLine(event.answer, limit) + by;
    if ("outcome" in event) return (OUTCOME_WORDS[event.outcome] || "result given: " + oneLine(event.result || "", limit)) + by;
    return (event.approved ? "approved" : "denied") + by;
  }

  // -- the SSE stream, read with fetch (EventSource cannot send the token) --------------

  /** Follows a session's stream from `next`, reconnecting (with Last-Event-ID) after a drop
      or a server restart; stops when the session is final or `stop()` is called. */
  class Follow {
    constructor(sid, onEvents, onState, next) {
      this.sid = sid;
      this.onEvents = onEvents;
      this.onState = onState;
      this.next = next || 0;
      this.abort = new AbortController();
      this.stopped = false;
      this.run();
    }

    stop() { this.stopped = true; this.abort.abort(); }

    async run() {
      let pause = 250;
      while (!this.stopped) {
        try {
          const extra = { accept: "text/event-stream" };
          if (this.next > 0) extra["last-event-id"] = String(this.next - 1);
          const response = await fetch(`${API}/session/${encodeURIComponent(this.sid)}/stream?startIndex=${this.next}`,
            { headers: headers(extra), signal: this.abort.signal, cache: "no-store" });
          if (response.status === 401) { askToken("the token was refused"); return; }
          if (!response.ok) {
            const data = await response.json().catch(() => ({}));
            throw new ApiError(response.status, data.error ? data.error.message : String(response.status));
          }
          this.onState("live");
          pause = 250;
          await this.read(response.body.getReader());
          // Ended: the session is final (nothing more will come) or the server is stopping.
          const view = await api("GET", `/session/${encodeURIComponent(this.sid)}`);
          if (FINAL.has(view.status)) { this.onState("ended"); return; }
        } catch (err) {
          if (this.stopped) return;
          if (err instanceof ApiError && (err.status === 404 || err.status === 400 || err.status === 401)) {
            this.onState("gone", err.message);
            return;
          }
        }
        if (this.stopped) return;
        this.onState("reconnecting");
        await sleep(pause);
        pause = Math.min(pause * 2, 2000);
      }
    }

    async read(reader) {
      const decoder = new TextDecoder();
      let buffer = "";
      for (;;) {
        const { value, done } = await reader.read();
        if (done) return;
        buffer += decoder.decode(value, { stream: true });
        const frames = buffer.split("\n\n");
        buffer = frames.pop();
        const events = [];
        for (const frame of frames) {
          const data = frame.split("\n").filter((l) => l.startsWith("data:")).map((l) => l.slice(5).trimStart()).join("\n");
          if (!data) continue; // a comment: the opening line or a heartbeat
          const event = JSON.parse(data);
          if (typeof event.index === "number" && event.index < this.next) continue;
          this.next = (typeof event.index === "number" ? event.index : this.next) + 1;
          events.push(event);
        }
        if (events.length && !this.stopped) this.onEvents(events);
      }
    }
  }

  // -- views ----------------------------------------------------------------------------

  let current = null; // the shown view: {stop()}

  function stopView() {
    if (current) current.stop();
    current = null;
  }

  function show(node) {
    const main = $("#main");
    main.replaceChildren(node);
  }

  function connState(state, detail) {
    const words = { live: "live", reconnecting: "reconnecting…", ended: "ended", gone: detail || "not found", offline: "server unreachable" };
    const box = $("#conn");
    box.textContent = words[state] || "";
    box.className = "conn c-" + state;
  }

  // The session list: polled, filterable by status.
  function listView() {
    const filter = new URLSearchParams(location.hash.split("?")[1] || "").get("status") || "all";
    const rows = el("div", { class: "rows", id: "sessions", "aria-live": "polite" });
    const chips = el("div", { class: "chips", role: "group", "aria-label": "filter by status" });
    const message = el("textarea", { id: "first", rows: 2, placeholder: "Start a session: the first message…", "aria-label": "first message" });
    const start = el("form", { class: "card new", onsubmit: async (event) => {
      event.preventDefault();
      const text = message.value.trim();
      if (!text) return;
      try {
        const out = await api("POST", "/session", { message: text });
        location.hash = "#/s/" + out.sessionId;
      } catch (err) { toast(err.message, true); }
    } }, message, el("button", { type: "submit", class: "primary", text: "Start" }));
    composerKeys(message, () => start.requestSubmit());
    const search = el("input", { type: "search", id: "search", class: "search", placeholder: "Search sessions: first message, id, agent…",
      "aria-label": "search sessions", oninput: () => keepFocus(page, () => render(latest)) });
    let stopped = false;
    let timer = null;
    let latest = [];

    /** Whether a session row has every word of the search box in its first message, id or agent. */
    function matches(s) {
      const words = search.value.toLowerCase().split(/\s+/).filter(Boolean);
      const text = [s.first || "", s.id, s.agent || ""].join(" ").toLowerCase();
      return words.every((w) => text.includes(w));
    }

    function render(sessions) {
      const counts = {};
      for (const s of sessions) counts[s.status] = (counts[s.status] || 0) + 1;
      chips.replaceChildren(...["all", ...STATUSES].filter((s) => s === "all" || counts[s] || s === filter).map((s) =>
        el("a", { class: "chip" + (s === filter ? " on" : "") + " s-" + s, href: s === "all" ? "#/" : "#/?status=" + s,
          "aria-pressed": s === filter ? "true" : "false" }, s, " ", el("span", { class: "n", text: s === "all" ? sessions.length : counts[s] || 0 }))));
      const shown = sessions.filter((s) => (filter === "all" || s.status === filter) && matches(s));
      if (!shown.length) {
        const none = search.value.trim() ? "No session matches “" + search.value.trim() + "”."
          : sessions.length ? "No " + filter + " sessions." : "No sessions yet: start one above.";
        rows.replaceChildren(el("p", { class: "muted empty", text: none }));
        return;
      }
      rows.replaceChildren(el("table", { class: "list" },
        el("thead", {}, el("tr", {}, ["status", "session", "agent", "turns", "steps", "last activity", "size"].map((h) => el("th", { text: h })))),
        el("tbody", {}, shown.map((s) => el("tr", { class: "row s-" + s.status, "data-id": s.id },
          el("td", { "data-label": "status" }, badge(s.status, s.parkedOn)),
          el("td", { "data-label": "session" },
            el("a", { class: "sid first", href: "#/s/" + s.id, text: s.first ? oneLine(s.first, 80) : "(no message yet)" }),
            el("div", { class: "id muted", text: s.id })),
          el("td", { "data-label": "agent", text: s.agent || "" }),
          el("td", { "data-label": "turns", class: "num", text: s.turns ?? "" }),
          el("td", { "data-label": "steps", class: "num", text: s.steps ?? "" }),
          el("td", { "data-label": "last activity", title: s.updatedAt || "", text: ago(s.updatedAt) }),
          el("td", { "data-label": "size", class: "num", text: bytes(s.bytes) }),
        ))),
      ));
    }

    let shown = null; // what the list shows now (re-rendered only when it changes)

    async function poll() {
      if (stopped) return;
      try {
        const data = await api("GET", "/sessions");
        if (stopped) return;
        const sessions = data.sessions || [];
        latest = sessions;
        // "last activity" says minutes: a minute's tick re-renders an unchanged list too.
        const now = JSON.stringify(sessions) + Math.floor(Date.now() / 60000);
        if (now !== shown) {
          shown = now;
          keepFocus(page, () => render(sessions));
        }
        connState("live");
      } catch (err) {
        if (err.status === 401) return;
        connState("offline");
      }
      if (!stopped) timer = setTimeout(poll, POLL_MS);
    }

    const page = el("section", { class: "page list-page" },
      el("h1", { class: "title", text: "Sessions" }), start, search, chips, rows);
    show(page);
    poll();
    return { stop() { stopped = true; clearTimeout(timer); } };
  }

  /** Enter sends, Shift+Enter is a new line, Escape leaves the box. */
  function composerKeys(box, send) {
    box.addEventListener("keydown", (event) => {
      if (event.key === "Enter" && !event.shiftKey && !event.isComposing) { event.preventDefault(); send(); }
      else if (event.key === "Escape") box.blur();
    });
  }

  // One session: conversation, pending requests, acting, and the step tree, all rendered from
  // the server's view of it; its event stream only says when to read the view again.
  function sessionView(sid, stepRef) {
    let view = null; // the latest view's head (status, pending, …)
    const turns = []; // the view's turns read so far, by number - 1 (the latest page first)
    const marks = new Map(); // their marks (compactions, clears), by turn number
    const conv = el("div", { class: "conv", id: "conv", "aria-live": "polite" });
    const before = el("div", { class: "turn-items" }); // what happened before the first turn
    const earlier = el("div", { class: "earlier" }); // asks for the turns before those read
    const turnNodes = []; // one container per turn
    const tail = el("div", { class: "turn-items" }); // the session's own error
    conv.append(before, earlier, tail);
    const loaded = () => turns.filter(Boolean);
    const pendingBox = el("div", { class: "pending", id: "pending" });
    const tree = el("div", { class: "tree", id: "tree" });
    const detail = el("div", { class: "detail", id: "step-detail" });
    const head = el("div", { class: "session-head" });
    let selected = stepRef || null;
    let scheduled = false;
    let stopped = false;
    let follow = null;
    let reading = false; // a read of the view is under way
    let again = false; // the stream moved on meanwhile: read it once more after
    let changedFrom = 0; // the first turn whose container must be rendered again

    const box = el("textarea", { id: "message", rows: 2, placeholder: "Message… (Enter sends)", "aria-label": "message" });
    const policy = el("select", { id: "policy", "aria-label": "while a turn runs" },
      el("option", { value: "steer", text: "steer the running turn" }),
      el("option", { value: "queue", text: "queue for the next turn" }));
    const send = async () => {
      const text = box.value.trim();
      if (!text) return;
      try {
        const out = await api("POST", `/session/${sid}`, { message: text, turnPolicy: policy.value });
        box.value = "";
        toast(out.disposition === "queued" ? "queued for the next turn" : out.disposition === "steered" ? "steered into the running turn" : "sent");
      } catch (err) { toast(err.message, true); }
    };
    composerKeys(box, send);
    const act = (name, confirmText) => async () => {
      if (confirmText && !window.confirm(confirmText)) return;
      try {
        await api("POST", `/session/${sid}/${name}`, {});
        toast(name + ": asked");
      } catch (err) { toast(err.message, true); }
    };
    const actions = el("div", { class: "actions", role: "toolbar", "aria-label": "session actions" },
      el("button", { type: "button", id: "act-cancel", onclick: act("cancel"), text: "Cancel turn" }),
      el("button", { type: "button", id: "act-compact", onclick: act("compact"), text: "Compact" }),
      el("button", { type: "button", id: "act-clear", onclick: act("clear", "Clear this session's context? Its history stays stored."), text: "Clear" }));
    const composer = el("form", { class: "composer", onsubmit: (e) => { e.preventDefault(); send(); } },
      box, el("div", { class: "composer-row" }, policy, el("button", { type: "submit", class: "primary", id: "send", text: "Send" })));

    const tabs = el("div", { class: "tabs", role: "tablist" },
      el("button", { type: "button", role: "tab", class: "tab on", "data-pane": "talk", onclick: pane, text: "Conversation" }),
      el("button", { type: "button", role: "tab", class: "tab", "data-pane": "steps", onclick: pane, text: "Steps" }));
    const page = el("section", { class: "page session-page", "data-pane": "talk" },
      head, tabs,
      el("div", { class: "cols" },
        el("div", { class: "col talk" }, conv, pendingBox, composer, actions),
        el("aside", { class: "col steps", "aria-label": "turns, steps and actions" }, el("h2", { text: "Turns → steps → actions" }), tree, detail)));

    function pane(event) {
      const name = event.currentTarget.dataset.pane;
      page.dataset.pane = name;
      for (const t of tabs.children) t.classList.toggle("on", t.dataset.pane === name);
    }

    function renderHead() {
      const status = view ? view.status : "waiting";
      head.replaceChildren(
        el("a", { href: "#/", class: "back", text: "← sessions" }),
        el("h1", { class: "title" }, el("span", { class: "sid", text: sid })),
        badge(status, view ? view.parkedOn : null));
      page.dataset.status = status;
    }

    // -- the conversation: each turn's items, rendered from its view ---------------------

    function userItem(text, by) {
      return el("div", { class: "msg user" }, el("div", { class: "who", text: who(by) || "you" }), el("div", { class: "plain", text: text || "" }));
    }

    /** What the model showed of its reasoning: dimmed, folded until opened. */
    function reasoningItem(turn, step, open) {
      const key = turn.id + ":" + step.index;
      return el("details", { class: "msg reasoning", "data-key": key, open: open || null },
        el("summary", { text: "reasoning" }), el("div", { class: "plain", text: step.reasoning }));
    }

    function assistantItem(turn, step) {
      const streaming = step.modelMs === null || step.modelMs === undefined;
      return el("div", { class: "msg assistant" + (streaming ? " streaming" : ""), "data-key": turn.id + ":" + step.index },
        el("div", { class: "md" }, ...markdown(step.text)));
    }

    const WAITS = { question: "an answer", outcome: "its outcome" };

    function toolItems(action, open) {
      const waiting = action.status === "waiting";
      const status = waiting ? "parked" : action.status === "requested" ? "requested" : outcome(action.status, action.isError);
      const word = waiting ? "waiting for " + (WAITS[action.waitedFor] || "approval") : status;
      const ended = !waiting && action.status !== "requested";
      const card = el("details", { class: "msg tool" + (action.isError ? " error" : ""), "data-call": action.callId, open: open || null },
        el("summary", {}, el("span", { class: "tool-name", text: "tool " }), el("code", { text: call(action.name, action.arguments) }), " ",
          el("span", { class: "badge s-" + status, text: word }), " ", el("span", { class: "muted dur", text: ended ? ms(action.durationMs) : "" })),
        el("div", { class: "label", text: "arguments" }), el("pre", { class: "args", text: json(action.arguments) }),
        el("pre", { class: "out", hidden: !ended, text: ended ? json(action.output) : "" }));
      const items = [card];
      const task = action.task;
      if (task && task.childSessionId) {
        items.push(el("div", { class: "msg task" }, "sub-agent ", el("strong", { text: task.name || "" }), " → ",
          el("a", { href: "#/s/" + task.childSessionId, class: "sid", text: task.childSessionId })));
        if (task.status) items.push(el("div", { class: "msg task" }, "sub-agent ", el("strong", { text: task.name || "" }), " " + task.status + ": ", oneLine(task.output || "", 300)));
      }
      if (action.answer) items.push(el("div", { class: "msg note", text: resolved(action.answer, 200) }));
      return items;
    }

    function markItem(mark) {
      if (mark.kind === "cleared") return el("div", { class: "msg divider", text: "context cleared" });
      return el("div", { class: "msg divider", text: mark.status === "completed"
        ? "context compacted: " + (mark.removedMessages ?? "?") + " messages summarized"
        : "compaction " + (mark.status || "failed") });
    }

    function turnItems(turn, opened) {
      const items = [];
      if (turn.input !== null && turn.input !== undefined) items.push(userItem(turn.input, turn.by));
      const steered = turn.steered || [];
      const own = marks.get(turn.number) || [];
      turn.steps.forEach((step, n) => {
        for (const s of steered) if (s.atStep === n) items.push(userItem(s.text, s.by));
        for (const m of own) if (m.atStep === n) items.push(markItem(m));
        if (step.reasoning) items.push(reasoningItem(turn, step, opened.has(turn.id + ":" + step.index)));
        if (step.text) items.push(assistantItem(turn, step));
        for (const a of step.actions || []) items.push(...toolItems(a, opened.has(a.callId)));
        if (step.error) items.push(el("div", { class: "msg error", text: "step failed: " + errorText(step.error) }));
      });
      for (const s of steered) if (s.atStep >= turn.steps.length) items.push(userItem(s.text, s.by));
      const canceller = who(turn.cancelledBy) ? " by " + who(turn.cancelledBy) : "";
      if (turn.status === "cancelled") items.push(el("div", { class: "msg divider", text: "turn cancelled" + canceller }));
      if (turn.status === "failed") items.push(el("div", { class: "msg error", text: "turn failed: " + errorText(turn.error) }));
      for (const m of own) if (m.atStep === null || m.atStep === undefined || m.atStep >= turn.steps.length) items.push(markItem(m));
      return items;
    }

    function renderConversation() {
      const opened = new Set([...conv.querySelectorAll("details.msg.tool[open]")].map((d) => d.dataset.call)
        .concat([...conv.querySelectorAll("details.msg.reasoning[open]")].map((d) => d.dataset.key)));
      before.replaceChildren(...(marks.get(0) || []).map(markItem));
      const first = turns.findIndex(Boolean);
      earlier.replaceChildren(...(first > 0 ? [el("button", { type: "button", class: "more", id: "earlier",
        onclick: readEarlier, text: "show earlier turns (" + first + " more)" })] : []));
      for (let i = changedFrom; i < turns.length; i++) {
        if (!turns[i]) continue;
        if (!turnNodes[i]) {
          turnNodes[i] = el("div", { class: "turn-items", "data-turn": i + 1 });
          let next = i + 1;
          while (next < turnNodes.length && !turnNodes[next]) next++;
          conv.insertBefore(turnNodes[i], turnNodes[next] || tail);
        }
        turnNodes[i].replaceChildren(...turnItems(turns[i], opened));
      }
      changedFrom = turns.length ? turns.length - 1 : 0; // only the latest turn changes
      tail.replaceChildren(...(view && view.status === "failed" && view.error
        ? [el("div", { class: "msg error", text: "session failed: " + errorText(view.error) })] : []));
    }

    // -- reading the view --------------------------------------------------------------

    /** Reads the view from the turn that may still change on; once at a time, once more if
        the stream moved on meanwhile. */
    async function read() {
      again = true;
      if (reading) return;
      reading = true;
      try {
        while (again && !stopped) {
          again = false;
          const from = Math.max(1, turns.length);
          const got = await api("GET", `/session/${encodeURIComponent(sid)}?fromTurn=${from}`);
          if (stopped) return;
          take(got);
          schedule();
        }
      } catch (err) {
        if (!stopped && !(err instanceof ApiError && err.status === 401)) again = true;
      } finally {
        reading = false;
      }
      return view;
    }

    /** Keeps a page of the view: its head, its turns and their marks. */
    function take(got) {
      view = got;
      const from = got.turnsFrom || 1;
      changedFrom = Math.min(changedFrom, from - 1);
      for (const turn of got.turns) turns[turn.number - 1] = turn;
      const last = from + got.turns.length - 1;
      for (let n = from > 1 ? from : 0; n <= last; n++) marks.delete(n);
      for (const m of got.marks || []) marks.set(m.turn, [...(marks.get(m.turn) || []), m]);
    }

    /** Reads the page of turns before the first one read (the server says which). */
    async function readEarlier() {
      const first = turns.findIndex(Boolean);
      if (first <= 0) return;
      const from = Math.max(1, first - 20);
      try {
        const got = await api("GET", `/session/${encodeURIComponent(sid)}?fromTurn=${from}&turns=${first + 1 - from}`);
        if (stopped) return;
        const head = view;
        take(got);
        view = head; // the page's head is older than the latest read's
        changedFrom = from - 1;
        schedule();
      } catch (err) { toast(err.message, true); }
    }

    // Rendering Markdown, the tree and the pending requests once per frame, not per read.
    function schedule() {
      if (scheduled) return;
      scheduled = true;
      requestAnimationFrame(() => {
        scheduled = false;
        if (stopped) return;
        const near = conv.scrollHeight - conv.scrollTop - conv.clientHeight < 80;
        renderConversation();
        keepFocus(head, renderHead);
        renderPending();
        keepFocus(tree, renderTree);
        if (near) conv.scrollTop = conv.scrollHeight;
      });
    }

    function respond(body) {
      return async () => {
        try {
          await api("POST", `/session/${sid}`, { inputResponses: [body] });
        } catch (err) { toast(err.message, true); }
      };
    }

    function renderPending() {
      const pending = (view && view.pending) || [];
      const cards_ = pending.map((p) => {
        if (p.kind === "question") {
          const answer = el("input", { type: "text", class: "answer", "aria-label": "answer", placeholder: "your answer" });
          const options = (p.options || (p.arguments && p.arguments.options) || []).map((o) =>
            el("button", { type: "button", class: "option", onclick: respond({ requestId: p.requestId, answer: String(o) }), text: String(o) }));
          return el("form", { class: "card ask", "data-request": p.requestId, onsubmit: (e) => {
            e.preventDefault();
            if (answer.value.trim()) respond({ requestId: p.requestId, answer: answer.value.trim() })();
          } },
            el("div", { class: "label", text: "question" }),
            el("p", { class: "plain", text: p.question || (p.arguments && p.arguments.question) || "" }),
            options.length ? el("div", { class: "opts" }, options) : null,
            el("div", { class: "composer-row" }, answer, el("button", { type: "submit", class: "primary", text: "Answer" })));
        }
        if (p.kind === "outcome") return outcomeCard(p);
        return el("div", { class: "card ask", "data-request": p.requestId },
          el("div", { class: "label", text: "approval" }),
          el("p", {}, "Run ", el("code", { text: call(p.tool || "?", p.arguments) }), "?"),
          el("div", { class: "opts" },
            el("button", { type: "button", class: "primary approve", onclick: respond({ requestId: p.requestId, approved: true }), text: "Approve" }),
            el("button", { type: "button", class: "deny", onclick: respond({ requestId: p.requestId, approved: false }), text: "Deny" }),
            el("button", { type: "button", class: "always", title: "approve, and do not ask again for this tool", onclick: respond({ requestId: p.requestId, approved: true, always: true }), text: "Always" })));
      });
      const have = [...pendingBox.children].map((c) => c.dataset.request).join(" ");
      const want = pending.map((p) => p.requestId).join(" ");
      if (have !== want) pendingBox.replaceChildren(...cards_); // keep a half-typed answer
    }

    /** An interrupted call whose outcome is unknown: run it again, treat it as failed, or
        give its result (`{requestId, outcome, result?}`, as the API takes it). */
    function outcomeCard(p) {
      const answer = (outcome_, result) => respond({ requestId: p.requestId, outcome: outcome_, result })();
      const result = el("input", { type: "text", class: "answer", "aria-label": "the call's result", placeholder: "what the call returned" });
      return el("form", { class: "card ask outcome", "data-request": p.requestId, onsubmit: (e) => {
        e.preventDefault();
        answer("result", result.value);
      } },
        el("div", { class: "label", text: "outcome unknown" }),
        el("p", {}, el("code", { text: call(p.tool || "?", p.arguments) }), " was running when eve stopped; whether it took effect is unknown."),
        el("pre", { class: "args", text: json(p.arguments) }),
        el("div", { class: "opts" },
          el("button", { type: "button", class: "rerun", onclick: () => answer("rerun"), text: "Run it again" }),
          el("button", { type: "button", class: "deny", onclick: () => answer("failed"), text: "Treat as failed" })),
        el("div", { class: "composer-row" }, result, el("button", { type: "submit", class: "primary", text: "Give result" })));
    }

    function renderTree() {
      tree.replaceChildren(...loaded().map((turn) => el("div", { class: "turn" },
        el("div", { class: "turn-head" }, el("strong", { text: "turn " + turn.number }), " ", badge(turn.status),
          turn.input ? el("span", { class: "muted", text: " “" + oneLine(turn.input, 60) + "”" }) : null),
        turn.error ? el("div", { class: "error", text: errorText(turn.error) }) : null,
        el("ul", {}, turn.steps.map((step) => {
          const ref = turn.number + "." + step.index;
          return el("li", {},
            el("a", { class: "step" + (ref === selected ? " on" : ""), href: `#/s/${sid}/${ref}`, "data-ref": ref,
              "aria-current": ref === selected ? "true" : null },
            "step " + ref + " ", badge(step.status), " ", el("span", { class: "muted", text: ms(step.durationMs) }),
            step.usage ? el("span", { class: "muted", text: " · " + (step.usage.inputTokens ?? "?") + " in / " + (step.usage.outputTokens ?? "?") + " out" }) : null),
            el("ul", {}, stepActions(step).map((a) => el("li", { class: "action" },
              a.kind === "model"
                ? [el("span", { class: "kind", text: "model call " }), a.text ? el("span", { class: "muted", text: "“" + oneLine(a.text, 50) + "” " }) : null]
                : [el("span", { class: "kind", text: "tool " }), el("code", { text: call(a.name, a.arguments) }), " ", badge(a.status === "waiting" ? "parked" : outcome(a.status, a.isError))],
              " ", el("span", { class: "muted", text: ms(a.durationMs) })))));
        })))));
      renderDetail();
    }

    /** The checkpoint before `step` in the session's order (maybe an earlier turn's last). */
    function previous(step) {
      let last = null;
      for (const turn of loaded()) {
        for (const s of turn.steps) {
          if (s === step) return last;
          last = { turn, step: s };
        }
      }
      return last;
    }

    function renderDetail() {
      if (!selected) { detail.replaceChildren(); return; }
      const [t, s] = selected.split(".");
      const turn = loaded().find((x) => String(x.number) === t);
      const step = turn && turn.steps.find((x) => String(x.index) === s);
      if (!step) { detail.replaceChildren(el("p", { class: "muted", text: "no step " + selected + " (yet)" })); return; }
      const last = previous(step);
      detail.replaceChildren(el("div", { class: "card checkpoint" },
        el("h3", { text: "checkpoint " + selected }),
        el("p", { class: "muted", text: "events " + step.firstEvent + "–" + step.lastEvent + " · " + step.status +
          (step.usage ? " · usage " + oneLine(step.usage, 100) : "") }),
        el("div", { class: "label", text: "changes since " + (last ? "step " + last.turn.number + "." + last.step.index : "the session start") }),
        el("pre", { class: "changes", text: stepChanges(turn, step).join("\n") })));
    }

    show(page);
    renderHead();
    const onState = (state, detailText) => {
      connState(state, detailText);
      if (state === "gone") conv.replaceChildren(el("p", { class: "error", text: detailText }));
    };
    // The view first, then its stream from the events it had: each new event reads it again.
    api("GET", `/session/${encodeURIComponent(sid)}`).then((got) => {
      if (stopped) return;
      take(got);
      schedule();
      follow = new Follow(sid, () => read(), onState, got.events || 0);
    }).catch((err) => {
      if (!stopped) onState(err instanceof ApiError && err.status !== 401 ? "gone" : "offline", err.message);
    });
    return {
      stop() { stopped = true; if (follow) follow.stop(); },
      select(ref) { selected = ref; renderTree(); },
      sid,
      focus() { box.focus(); },
    };
  }

  // -- dev reload results ---------------------------------------------------------------

  let devTimer = null;

  /** Who this tab is signed in as, and a way out (the token leaves the tab). */
  function showMe(principal) {
    const me = $("#me");
    if (!principal || !sessionStorage.getItem(TOKEN_KEY)) { me.hidden = true; return; }
    const name = who(principal);
    if (me.dataset.name === name && !me.hidden) return;
    me.dataset.name = name;
    me.hidden = false;
    me.replaceChildren(el("span", { class: "muted", text: name }), " ",
      el("button", { type: "button", class: "ghost", id: "logout", text: "log out", onclick: () => {
        sessionStorage.removeItem(TOKEN_KEY);
        me.hidden = true;
        route();
      } }));
  }

  async function pollInfo() {
    clearTimeout(devTimer);
    try {
      const info = await api("GET", "/info");
      $("#agent").textContent = [info.agent, info.model].filter(Boolean).join(" · ");
      showMe(info.principal);
      const bar = $("#dev");
      const dev = info.dev;
      if (!dev) { bar.hidden = true; }
      else {
        const last = dev.last;
        bar.hidden = false;
        bar.className = "dev" + (last && !last.ok ? " bad" : "");
        bar.replaceChildren(el("strong", { text: "eve dev " }),
          !last ? "watching " + dev.watching + " (agent " + dev.agent + ")"
            : last.ok ? "reloaded agent " + last.agent + " at " + clock(last.at) + " (changed: " + last.changed + ")"
              : el("span", {}, "reload failed at " + clock(last.at) + ", still serving the last good agent " + (last.agent || "") + ": ",
                el("code", { class: "reload-error", text: last.error || "" })));
      }
    } catch (err) {
      if (err.status === 401) { devTimer = null; return; } // polled again once the token is in
    }
    devTimer = setTimeout(pollInfo, POLL_MS);
  }

  // -- routing, theme, keys -------------------------------------------------------------

  function route() {
    if (asking) return;
    const hash = location.hash.replace(/^#/, "");
    const m = /^\/s\/([A-Za-z0-9_-]{1,64}(?:\.\d{1,9})*)(?:\/(\d+\.\d+))?$/.exec(hash);
    if (m && current && current.sid === m[1]) { current.select(m[2] || null); return; }
    stopView();
    current = m ? sessionView(m[1], m[2] || null) : listView();
    if (!devTimer) pollInfo();
  }

  function applyTheme() {
    const theme = localStorage.getItem(THEME_KEY);
    if (theme) document.documentElement.dataset.theme = theme;
    else delete document.documentElement.dataset.theme;
    $("#theme").textContent = theme || "auto";
  }

  function cycleTheme() {
    const order = [null, "light", "dark"];
    const now = localStorage.getItem(THEME_KEY);
    const next = order[(order.indexOf(now) + 1) % order.length];
    if (next) localStorage.setItem(THEME_KEY, next);
    else localStorage.removeItem(THEME_KEY);
    applyTheme();
  }

  function typing(target) {
    return target && (target.tagName === "INPUT" || target.tagName === "TEXTAREA" || target.tagName === "SELECT");
  }

  document.addEventListener("keydown", (event) => {
    if (typing(event.target) || event.ctrlKey || event.metaKey || event.altKey) return;
    if (event.key === "/") {
      const box = $("#message") || $("#first") || $("#token");
      if (box) { event.preventDefault(); box.focus(); }
    } else if (event.key === "Escape" && location.hash.startsWith("#/s/")) {
      location.hash = "#/";
    } else if (event.key === "t") {
      cycleTheme();
    }
  });

  document.addEventListener("DOMContentLoaded", () => {
    $("#theme").addEventListener("click", cycleTheme);
    applyTheme();
    window.addEventListener("hashchange", route);
    finishLogin().then(route);
  });
})();
