// The web chat of agentrt: talks to the HTTP API of the server that served it.
//
// The page carries no ambient credential. The token is typed into the page once
// and kept in sessionStorage, which belongs to this origin alone (scheme, host
// and port: another server on this machine cannot read it) and ends with the
// tab. Every request sends it in the Authorization header itself, with
// credentials "omit", so the browser never attaches a cookie or a login of its
// own; the event stream is read with fetch() for the same reason (EventSource
// cannot send a header).
//
// What runs is decided by the server's events alone, in the order they come: a
// run is shown as running from its task_started until its run_ended, and a
// task hash once ended is never shown as running again, whatever a late answer
// to a request says. Replies are Markdown, rendered by markdown-it (raw HTML
// off) and passed through DOMPurify before they reach the document.
"use strict";

const $ = (sel) => document.querySelector(sel);

const state = {
  current: null, // the open session id
  runs: new Map(), // session id -> {hash, shown, resumed, generation} of its live run
  ended: new Set(), // task hashes whose run_ended has been seen
  sending: new Set(), // session ids with a run or resume request on its way
  logs: new Map(), // session id -> the log element of that session
  bubbles: new Map(), // task hash -> {el, text, sid} of the reply being streamed
  thoughts: new Map(), // task hash -> the reasoning bubble being streamed (shown dimmed)
  unsaved: new Map(), // task hash -> the bubbles of the model's response not saved yet
  questions: new Map(), // question id -> question
  sessions: [],
  titles: new Map(), // session id -> its title, when the server gives one
  generation: 0, // counts the event stream's connections
  lastEventId: null, // the id of the last event read, when the server numbers them
  history: null, // null: not known yet; then true or false: the history API exists
  loaded: new Set(), // session ids whose stored messages were read into their log
  models: null, // {models, default} from GET /v1/models; null until read (or no such route)
  modelOf: new Map(), // session id -> the model it runs with, as the server said
  choosing: new Map(), // session id -> its model choice on its way (settles when answered)
  picked: new Map(), // session id -> the model of its last choice on its way
  editing: null, // the session whose last message the composer is editing, if any
};

const TOKEN_KEY = "agentrt.token";
const SESSION_KEY = "agentrt.session";
const PHONE = window.matchMedia("(max-width: 760px)");
let token = sessionStorage.getItem(TOKEN_KEY) || "";

function request(path, init = {}) {
  return fetch(path, {
    ...init,
    headers: { ...(init.headers || {}), Authorization: `Bearer ${token}` },
    credentials: "omit",
    cache: "no-store",
  });
}

class ApiError extends Error {
  constructor(status, code, message) {
    super(message);
    this.status = status;
    this.code = code;
  }
}

async function api(method, path, body) {
  const init = { method, headers: {} };
  if (body !== undefined) {
    init.headers["Content-Type"] = "application/json";
    init.body = JSON.stringify(body);
  }
  const response = await request(path, init);
  const data = await response.json().catch(() => ({}));
  if (!response.ok) {
    const error = data.error || { code: "http", message: response.statusText };
    if (response.status === 401) logOut("The server no longer accepts the token: log in again.");
    throw new ApiError(response.status, error.code, error.message);
  }
  return data;
}

const sessionPath = (sid) => `/v1/session/${encodeURIComponent(sid)}`;

function notice(text) {
  const el = $("#notice");
  el.textContent = text || "";
  el.hidden = !text;
}

function newSessionId() {
  const bytes = new Uint8Array(5);
  crypto.getRandomValues(bytes);
  const sid = "chat-" + Array.from(bytes, (b) => b.toString(16).padStart(2, "0")).join("");
  // A new session has no history to read; reading it while its first run is being
  // stored would show that run twice.
  state.loaded.add(sid);
  return sid;
}

function announce(text) {
  // One whole message at a time: the live region is not the log, which changes
  // with every streamed word.
  if (text.trim()) $("#announce").textContent = text;
}

// -- Markdown ------------------------------------------------------------------

const markdown = window.markdownit({ html: false, linkify: true, breaks: true });

if (window.DOMPurify) {
  DOMPurify.addHook("afterSanitizeAttributes", (node) => {
    if (node.tagName === "A") {
      node.setAttribute("target", "_blank");
      node.setAttribute("rel", "noopener noreferrer");
    }
  });
}

// A new `tag` element of class `className`, holding `text` (as text, never markup) when given.
function element(tag, className, text) {
  const el = document.createElement(tag);
  el.className = className;
  if (text !== undefined) el.textContent = text;
  return el;
}

function renderMarkdown(el, text) {
  const html = DOMPurify.sanitize(markdown.render(text), { USE_PROFILES: { html: true } });
  el.innerHTML = html;
  for (const pre of el.querySelectorAll("pre")) {
    const code = pre.querySelector("code");
    const block = element("div", "code-block");
    pre.replaceWith(block);
    const lang = /language-([\w+#.-]+)/.exec(code ? code.className : "");
    if (lang) block.append(element("span", "lang", lang[1]));
    const copy = button("Copy", () => copyCode(copy, (code || pre).textContent), "copy");
    copy.setAttribute("aria-label", "Copy the code");
    block.append(pre, copy);
  }
}

async function copyCode(el, text) {
  try {
    await navigator.clipboard.writeText(text);
    el.textContent = "Copied";
  } catch (error) {
    el.textContent = "Copy failed";
  }
  setTimeout(() => { el.textContent = "Copy"; }, 2000);
}

// A title as plain text: the first line of a message is Markdown ("## Plan", "Hi **there**"),
// read as markdown-it reads it, and only its text kept.
function plainTitle(text) {
  const template = document.createElement("template");
  template.innerHTML = DOMPurify.sanitize(markdown.render(text || ""));
  return template.content.textContent.replace(/\s+/g, " ").trim();
}

// -- the conversation log ---------------------------------------------------

function logOf(sid) {
  let log = state.logs.get(sid);
  if (!log) {
    log = element("div", "session-log");
    log.dataset.session = sid;
    state.logs.set(sid, log);
  }
  return log;
}

function add(sid, kind, text) {
  const el = element("div", `msg ${kind}`, text);
  logOf(sid).append(el);
  if (sid === state.current) el.scrollIntoView({ block: "end" });
  return el;
}

// A message of the user's (not an answer to a question): the one regenerate and edit act on.
function addTurn(sid, text) {
  const el = add(sid, "user", text);
  el.dataset.turn = "user";
  return el;
}

function lastTurn(sid) {
  const turns = logOf(sid).querySelectorAll(".msg.user[data-turn]");
  return turns.length ? turns[turns.length - 1] : null;
}

function addReply(sid, text) {
  const el = add(sid, "assistant md", "");
  renderMarkdown(el, text);
  return el;
}

function addFailure(sid, text) {
  const el = add(sid, "status failed", text);
  el.setAttribute("role", "alert");
  return el;
}

// A reply streams into its bubble; the Markdown is rendered at most once a frame.
let renderQueued = false;
const dirty = new Set();

function renderDirty() {
  renderQueued = false;
  for (const bubble of dirty) {
    renderMarkdown(bubble.el, bubble.text);
    if (bubble.sid === state.current) bubble.el.scrollIntoView({ block: "end" });
  }
  dirty.clear();
}

// The model's response is saved whole, with its tool calls, before any call runs: a
// response cut short by a stop was never saved, and a resumed run says it again.
function streamed(hash, el) {
  if (!state.unsaved.has(hash)) state.unsaved.set(hash, []);
  state.unsaved.get(hash).push(el);
}

function closeBubble(hash, unsaved) {
  state.thoughts.delete(hash);
  for (const el of state.unsaved.get(hash) || []) {
    if (unsaved) el.dataset.unsaved = "true";
  }
  state.unsaved.delete(hash);
  const bubble = state.bubbles.get(hash);
  if (!bubble) return;
  state.bubbles.delete(hash);
  dirty.delete(bubble);
  renderMarkdown(bubble.el, bubble.text);
  if (bubble.sid === state.current) announce(bubble.text);
}

function setCurrent(sid) {
  state.current = sid;
  if (sid) sessionStorage.setItem(SESSION_KEY, sid);
  else sessionStorage.removeItem(SESSION_KEY);
  history.replaceState(null, "", sid ? "#" + encodeURIComponent(sid) : location.pathname);
}

function renderTitle() {
  const sid = state.current;
  const title = sid && state.titles.get(sid);
  $("#session-name").hidden = !title;
  $("#session-name").textContent = title || "";
  $("#session-title").textContent = sid || "New chat";
  $("#questions-heading").textContent = sid ? chatName(sid) : "";
}

// A chat as its headings name it: its title once the server gives one, else its id.
const chatName = (sid) => state.titles.get(sid) || sid;

function showSession(sid) {
  if (state.editing && state.editing !== sid) stopEditing();
  setCurrent(sid);
  renderTitle();
  const log = $("#log");
  log.replaceChildren(sid ? logOf(sid) : document.createTextNode(""));
  notice("");
  if (PHONE.matches) setSidebar(false);
  renderRunState();
  renderSessions();
  renderQuestions();
  refreshTask();
  renderModels();
  showUsage(null);
  if (sid) {
    // A session's first showing reads its tokens with its history; later ones anew.
    if (state.loaded.has(sid)) refreshUsage(sid);
    loadHistory(sid);
    refreshModel(sid);
  }
}

function renderRunState() {
  const sid = state.current;
  const run = sid && state.runs.get(sid);
  $("#stop").hidden = !run;
  // Undo puts back a finished run's files: not while one runs.
  $("#undo").hidden = !sid || !!run;
  $("#run-state").textContent = run ? `running (task ${run.hash})` : "";
  const busy = !!sid && state.sending.has(sid);
  $("#composer").setAttribute("aria-busy", busy ? "true" : "false");
  // One run at a time per session: sending now would only be refused (409).
  $("#send").disabled = busy || !!run;
  if (!run && $("#stop-dialog").open) $("#stop-dialog").close("no");
  renderTurnActions();
}

// -- the model, and the last turn ----------------------------------------------------

// The models come from GET /v1/models; a server without that route has no picker.
async function loadModels() {
  try {
    state.models = await api("GET", "/v1/models");
  } catch (error) {
    state.models = null;
    if (error.status !== 404) notice(`The models cannot be listed: ${error.message}`);
  }
  renderModels();
  if (state.current) refreshModel(state.current);
}

async function refreshModel(sid) {
  if (!state.models) return;
  try {
    const data = await api("GET", sessionPath(sid) + "/model");
    state.modelOf.set(sid, data.model);
  } catch (error) {
    if (error.status !== 404) notice(error.message);
  }
  if (sid === state.current) renderModels();
}

function renderModels() {
  const data = state.models;
  $("#models").hidden = !data || !data.models.length;
  if (!data) return;
  const sid = state.current;
  // A choice on its way is shown, whatever a read of the chat's model answers meanwhile.
  const current = (sid && (state.picked.get(sid) || state.modelOf.get(sid))) || data.default;
  const select = $("#model");
  select.replaceChildren(...data.models.map((m) => {
    const option = document.createElement("option");
    option.value = m.name;
    option.textContent = m.name + (m.default ? " (default)" : "") +
      (m.usable ? "" : " (cannot be used)");
    // A model that cannot be used is listed, with why, but cannot be picked.
    option.disabled = !m.usable;
    option.title = m.why || "";
    return option;
  }));
  select.value = current;
  const unusable = data.models.filter((m) => !m.usable);
  $("#model-why").textContent = unusable.map((m) => `${m.name}: ${m.why}`).join("; ");
}

async function chooseModel(name) {
  // A new chat gets its id now: the model is kept with it on the server.
  if (!state.current) showSession(newSessionId());
  const sid = state.current;
  // Choices go one after another: two sent at once could reach the server in either
  // order, and the chat keep the one picked first while the picker shows the last.
  const before = state.choosing.get(sid) || Promise.resolve();
  const put = before.then(() => api("PUT", sessionPath(sid) + "/model", { model: name }));
  // A run, regenerate, edit or resume asked for meanwhile waits for it (`startRequest`):
  // sent at once, it could reach the server first and run with the model chosen before.
  const settled = put.then(() => {}, () => {});
  state.choosing.set(sid, settled);
  state.picked.set(sid, name);
  try {
    const data = await put;
    state.modelOf.set(sid, data.model);
    notice("");
  } catch (error) {
    notice(error.message);
  }
  // A later choice on its way has the last word: the picker shows it meanwhile.
  if (state.choosing.get(sid) !== settled) return;
  state.choosing.delete(sid);
  state.picked.delete(sid);
  if (sid === state.current) renderModels();
}

function renderTurnActions() {
  const sid = state.current;
  const last = sid ? lastTurn(sid) : null;
  const busy = !sid || state.sending.has(sid) || state.runs.has(sid);
  const editing = !!sid && state.editing === sid;
  $("#regenerate").hidden = !last || editing;
  $("#edit-last").hidden = !last || editing;
  $("#regenerate").disabled = busy;
  $("#edit-last").disabled = busy;
  $("#cancel-edit").hidden = !editing;
  $("#send").textContent = editing ? "Resend" : "Send";
}

function startEditing() {
  const sid = state.current;
  const last = sid && lastTurn(sid);
  if (!last) return;
  state.editing = sid;
  $("#input").value = last.textContent;
  $("#input").focus();
  renderTurnActions();
}

function stopEditing() {
  state.editing = null;
  $("#input").value = "";
  renderTurnActions();
}

// Regenerate (no text) or edit and resend (text): the server replaces the last message of
// the user's and all after it, or refuses (409, a run going on or a task pending) and
// nothing changes. What is replaced leaves the view at once, and comes back if refused.
async function redo(text) {
  const sid = state.current;
  const last = sid && lastTurn(sid);
  if (!last || state.sending.has(sid) || state.runs.has(sid)) return;
  notice("");
  const log = logOf(sid);
  const dropped = [];
  for (let el = text === undefined ? last.nextSibling : last; el; el = el.nextSibling) {
    dropped.push(el);
  }
  for (const el of dropped) el.remove();
  const mine = text === undefined ? null : addTurn(sid, text);
  if (text !== undefined) {
    state.editing = null;
    $("#input").value = "";
  }
  try {
    await startRequest(sid, sessionPath(sid) + (text === undefined ? "/regenerate" : "/edit"),
      text === undefined ? undefined : { text });
  } catch (error) {
    mine?.remove();
    log.append(...dropped);
    if (text !== undefined && !$("#input").value) {
      state.editing = sid;
      $("#input").value = text;
    }
    notice(error.message);
  }
  renderTurnActions();
}

// -- the history of a session, when the server keeps it ----------------------------

// Stored messages come from GET /v1/sessions/{id}/messages?after=SEQ&limit=N, a page of
// {seq, role, content, tool_calls?, tool_call_id?} and `next`. A server without that
// route answers 404 not_found, and the page goes on without history.
const HISTORY_PAGE = 200;
const HISTORY_PAGES = 50;

async function loadHistory(sid) {
  if (state.history === false || state.loaded.has(sid)) return;
  state.loaded.add(sid);
  const messages = [];
  let after = null;
  let usage = null;
  try {
    for (let page = 0; page < HISTORY_PAGES; page++) {
      const query = new URLSearchParams({ limit: String(HISTORY_PAGE) });
      if (after !== null) query.set("after", String(after));
      const data = await api("GET",
        `/v1/sessions/${encodeURIComponent(sid)}/messages?${query}`);
      state.history = true;
      messages.push(...(data.messages || []));
      usage = data.usage;
      if (data.next === null || data.next === undefined || data.next === after) break;
      after = data.next;
    }
  } catch (error) {
    if (error.status === 404 && error.code === "not_found") {
      state.history = false; // no such route: this server keeps no history to show
      return;
    }
    if (error.status !== 404) notice(`The session's messages cannot be read: ${error.message}`);
    return;
  }
  if (sid === state.current) showUsage(usage);
  // Stored messages come before whatever the live events added meanwhile.
  const log = logOf(sid);
  const live = [...log.childNodes];
  log.replaceChildren();
  const tools = new Map(); // tool call id -> the tool's name, for its result
  for (const message of messages) showStored(sid, message, tools);
  log.append(...live);
  if (sid === state.current) {
    log.lastElementChild?.scrollIntoView({ block: "end" });
    renderTurnActions();
  }
}

// The words of agentrt.vocab.events.describe_compaction.
function compactionWords(count) {
  return `${count} earlier ${count === 1 ? "message" : "messages"} summarised`;
}

function showStored(sid, message, tools) {
  const content = typeof message.content === "string" ? message.content : "";
  if (message.summarised) {
    add(sid, "status", `(${compactionWords(message.summarised)})`);
  } else if (message.role === "user") {
    addTurn(sid, content);
  } else if (message.role === "assistant") {
    if (content.trim()) addReply(sid, content);
    for (const call of message.tool_calls || []) {
      tools.set(call.id, call.name);
      add(sid, "tool", `→ ${call.name || "tool"} ${describeArguments(call.arguments)}`);
    }
  } else if (message.role === "tool") {
    const name = message.name || tools.get(message.tool_call_id) || "result";
    add(sid, "tool", `✓ ${name}: ${content.slice(0, 200)}`);
  }
}

// The session's tokens (and their cost, when its models' prices are known), as the
// server keeps them: the same words as the terminal's status line.
function showUsage(usage) {
  const el = $("#usage");
  if (!usage || !(usage.input_tokens || usage.output_tokens)) {
    el.textContent = "";
    return;
  }
  const cached = usage.cached_tokens ? ` (${usage.cached_tokens} cached)` : "";
  const reasoning = usage.reasoning_tokens ? ` (${usage.reasoning_tokens} reasoning)` : "";
  const cost = usage.cost === null || usage.cost === undefined ? "" : ` $${usage.cost.toFixed(4)}`;
  el.textContent =
    `tokens in ${usage.input_tokens}${cached} / out ${usage.output_tokens}${reasoning}${cost}`;
}

async function refreshUsage(sid) {
  if (state.history === false) return; // a server without the route keeps no tokens to show
  try {
    const data = await api("GET", `/v1/sessions/${encodeURIComponent(sid)}/messages?limit=1`);
    state.history = true;
    if (sid === state.current) showUsage(data.usage);
  } catch (error) {
    if (error.status === 404 && error.code === "not_found") state.history = false;
    else if (error.status !== 404) notice(`The session's tokens cannot be read: ${error.message}`);
  }
}

function describeArguments(args) {
  if (typeof args === "string") return args;
  return Object.entries(args || {}).map(([k, v]) => `${k}=${JSON.stringify(v)}`).join(" ");
}

// -- events -----------------------------------------------------------------

function endRun(sid, hash) {
  state.ended.add(hash);
  const run = state.runs.get(sid);
  if (run && run.hash === hash) state.runs.delete(sid);
}

function markShown(sid, hash) {
  const run = state.runs.get(sid);
  if (run && run.hash === hash) run.shown = true;
}

const handlers = {
  ready(ev) {
    state.questions = new Map(ev.questions.map((q) => [q.id, q]));
    renderQuestions();
    refreshSessions(state.generation);
    refreshTask();
  },
  task_started(ev) {
    if (state.ended.has(ev.task_hash)) return;
    state.runs.set(ev.session_id, {
      hash: ev.task_hash, shown: false, resumed: ev.resumed, generation: state.generation,
    });
    if (ev.resumed) {
      // A reply the stop cut short was never saved: the model says it again now. So is
      // reasoning cut short before any reply (the server counts the reply's words only).
      const unsaved = [...logOf(ev.session_id).querySelectorAll(".msg[data-unsaved]")];
      const replies = unsaved.filter((el) => el.classList.contains("assistant"));
      if (ev.regenerated_words > 0 || replies.length === 0) {
        for (const el of unsaved) el.remove();
      }
    }
    add(ev.session_id, "status", ev.resumed ? "resumed the pending task" : "run started");
    if (ev.session_id === state.current) renderRunState();
    refreshSessions();
    if (ev.session_id === state.current) refreshTask();
  },
  reasoning(ev) {
    markShown(ev.session_id, ev.task_hash);
    let thought = state.thoughts.get(ev.task_hash);
    if (!thought) {
      thought = add(ev.session_id, "reasoning", "");
      state.thoughts.set(ev.task_hash, thought);
      streamed(ev.task_hash, thought);
    }
    thought.textContent += ev.text;
    if (ev.session_id === state.current) thought.scrollIntoView({ block: "end" });
  },
  text(ev) {
    markShown(ev.session_id, ev.task_hash);
    state.thoughts.delete(ev.task_hash); // reasoning after this text starts a new bubble
    let bubble = state.bubbles.get(ev.task_hash);
    if (!bubble) {
      bubble = { el: add(ev.session_id, "assistant md", ""), text: "", sid: ev.session_id };
      state.bubbles.set(ev.task_hash, bubble);
      streamed(ev.task_hash, bubble.el);
    }
    bubble.text += ev.text;
    dirty.add(bubble);
    if (!renderQueued) {
      renderQueued = true;
      requestAnimationFrame(renderDirty);
    }
  },
  tool_call(ev) {
    markShown(ev.session_id, ev.task_hash);
    // The reply before a tool call was saved with the call.
    closeBubble(ev.task_hash, false);
    const attempt = ev.attempt > 1 ? ` (may already have run: attempt ${ev.attempt})` : "";
    add(ev.session_id, "tool", `→ ${ev.name} ${describeArguments(ev.arguments)}${attempt}`);
  },
  tool_result(ev) {
    add(ev.session_id, "tool", `${ev.ok ? "✓" : "✗"} ${ev.name}: ${ev.preview}`);
  },
  tool_progress(ev) {
    // An MCP server's progress: "2/5 (40%) receiving objects", or the count alone.
    let done = `${ev.progress}`;
    if (ev.total) done += `/${ev.total} (${Math.round((100 * ev.progress) / ev.total)}%)`;
    add(ev.session_id, "tool progress", `… ${ev.name}: ${done} ${ev.message}`.trimEnd());
  },
  verify(ev) {
    add(ev.session_id, "status", ev.message);
  },
  usage() {},
  compaction(ev) {
    const who = ev.agent ? `${ev.agent}: ` : "";
    add(ev.session_id, "status", `(${who}${compactionWords(ev.summarised)})`);
  },
  run_ended(ev) {
    // A reply the run did not finish was not saved: a resume says it again.
    closeBubble(ev.task_hash, ev.outcome !== "finished" && ev.outcome !== "awaiting_answer");
    endRun(ev.session_id, ev.task_hash);
    // The server words the end (the same words as the terminal and the bots);
    // the page adds only how to go on here.
    const resumable = ev.pending_kept && ev.outcome !== "awaiting_answer";
    const text = ev.summary + (resumable ? ": resume it when you like" : "");
    if (ev.outcome === "failed") addFailure(ev.session_id, text);
    else add(ev.session_id, "status", text);
    if (ev.session_id === state.current) {
      if (ev.outcome !== "failed" && ev.outcome !== "finished") announce(text);
      renderRunState();
    }
    refreshSessions();
    if (ev.session_id === state.current) {
      refreshTask();
      refreshUsage(ev.session_id);
    }
  },
  question(ev) {
    markShown(ev.session_id, ev.task_hash);
    state.questions.set(ev.id, ev);
    renderQuestions();
    refreshSessions();
  },
  question_closed(ev) {
    state.questions.delete(ev.id);
    renderQuestions();
    refreshSessions();
  },
  reload() {
    // The events missed while away are not kept: read the conversations afresh. A reply
    // still streaming goes on in a bubble of its own.
    state.loaded.clear();
    state.bubbles.clear();
    state.thoughts.clear();
    state.unsaved.clear();
    dirty.clear();
    for (const log of state.logs.values()) log.replaceChildren();
    if (state.current) loadHistory(state.current);
  },
};

// The live stream: server-sent events read with fetch(), reconnecting after a second.
let stream = null; // the AbortController of the running stream

function setLive(live) {
  $("#conn").textContent = live ? "live" : "reconnecting";
  $("#conn").classList.toggle("live", live);
}

function dispatch(block) {
  let data = [];
  let id = null;
  for (const line of block.split("\n")) {
    const colon = line.indexOf(":");
    const field = colon < 0 ? line : line.slice(0, colon);
    const value = colon < 0 ? "" : line.slice(colon + 1).replace(/^ /, "");
    if (field === "data") data.push(value);
    else if (field === "id") id = value;
  }
  if (!data.length) return; // a keep-alive comment
  if (id !== null) {
    // A reconnection is sent what it missed, after Last-Event-ID; an event older than the
    // last one read was shown already. (ready, and reload after it, carry the id the
    // stream starts from: the same id twice is not a repeat.)
    const n = Number(id);
    const last = Number(state.lastEventId);
    if (state.lastEventId !== null && Number.isFinite(n) && Number.isFinite(last) && n < last) {
      return;
    }
    state.lastEventId = id;
  }
  const ev = JSON.parse(data.join("\n"));
  const handler = handlers[ev.type];
  if (handler) handler(ev);
}

async function readEvents(body) {
  const reader = body.pipeThrough(new TextDecoderStream()).getReader();
  let buffer = "";
  for (;;) {
    const { value, done } = await reader.read();
    if (done) return;
    buffer += value.replace(/\r\n?/g, "\n");
    let end;
    while ((end = buffer.indexOf("\n\n")) >= 0) {
      const block = buffer.slice(0, end);
      buffer = buffer.slice(end + 2);
      dispatch(block);
    }
  }
}

async function connect() {
  if (stream) stream.abort();
  const controller = new AbortController();
  stream = controller;
  while (!controller.signal.aborted) {
    try {
      const headers = { Accept: "text/event-stream" };
      if (state.lastEventId !== null) headers["Last-Event-ID"] = state.lastEventId;
      const response = await request("/v1/events", { headers, signal: controller.signal });
      if (response.status === 401) {
        logOut("The server no longer accepts the token: log in again.");
        return;
      }
      if (!response.ok || !response.body) throw new Error(`HTTP ${response.status}`);
      state.generation += 1;
      setLive(true);
      await readEvents(response.body);
    } catch (error) {
      if (controller.signal.aborted) return;
    }
    setLive(false);
    await new Promise((resolve) => setTimeout(resolve, 1000));
  }
}

// -- questions ----------------------------------------------------------------

const CHOICE_LABELS = { allow: "Allow", allow_session: "Allow for session", deny: "Deny" };

function button(label, onClick, className) {
  const el = document.createElement("button");
  el.type = "button";
  el.textContent = label;
  if (className) el.className = className;
  el.addEventListener("click", onClick);
  return el;
}

// An answer names the chat whose view it was given in: the server refuses it for a
// question of any other session, as if there were no such question.
async function answer(q, view, value, secret) {
  const body = { value, session_id: view };
  if (secret !== undefined) body.secret = secret;
  try {
    await api("POST", `/v1/questions/${encodeURIComponent(q.id)}/answer`, body);
    state.questions.delete(q.id);
    renderQuestions();
  } catch (error) {
    notice(error.message);
  }
}

// The unified diff of the file change a confirmation asks about: one line an element,
// classed by what it is (added, removed, hunk, file), set as text, never as markup.
function renderDiff(diff) {
  const block = element("pre", "diff");
  block.setAttribute("aria-label", "the change");
  for (const line of diff.split("\n")) {
    const row = document.createElement("span");
    if (line.startsWith("+++ ") || line.startsWith("--- ")) row.className = "file";
    else if (line.startsWith("@@")) row.className = "hunk";
    else if (line.startsWith("+")) row.className = "add";
    else if (line.startsWith("-")) row.className = "remove";
    row.textContent = line + "\n";
    block.append(row);
  }
  return block;
}

function renderQuestion(q, view) {
  const card = element("div", "question");
  card.dataset.id = q.id;
  card.dataset.kind = q.kind;
  card.dataset.session = q.session_id;
  card.setAttribute("role", "group");
  card.setAttribute("aria-label", `question from ${chatName(q.session_id)}`);
  const meta = element("div", "meta", `${q.session_id}${q.agent ? " / " + q.agent : ""} asks` +
    (q.tool ? ` (${q.tool})` : ""));
  card.append(meta, element("p", "prompt", q.prompt));
  if (q.diff) card.append(renderDiff(q.diff));
  if (q.error) card.append(element("p", "error", q.error));
  if (q.kind === "confirm") {
    for (const choice of q.choices) {
      card.append(button(CHOICE_LABELS[choice] || choice, () => answer(q, view, choice)));
    }
  } else if (q.kind === "question") {
    const form = document.createElement("form");
    const input = document.createElement("input");
    input.setAttribute("aria-label", "answer");
    input.autocomplete = "off";
    const submit = document.createElement("button");
    submit.type = "submit";
    submit.textContent = "Answer";
    form.append(input, submit);
    form.addEventListener("submit", (e) => {
      e.preventDefault();
      answer(q, view, input.value);
    });
    card.append(form);
  } else {
    // A secret or the system password: typed into a masked field, sent once, never shown.
    const input = document.createElement("input");
    input.type = "password";
    input.autocomplete = "off";
    input.setAttribute("aria-label", q.kind === "password" ? "system password" : "secret value");
    card.append(input);
    card.append(button(q.kind === "password" ? "Allow" : "Store", () => {
      const value = input.value;
      input.value = "";
      answer(q, view, q.kind === "password" ? "allow" : "store", value);
    }));
    card.append(button(q.kind === "password" ? "Deny" : "Decline", () => answer(q, view, "deny")));
  }
  return card;
}

// A question shows only in the view of the chat it belongs to, under that chat's title: a
// new chat or another one never shows it (answering there would answer for another
// session), and the session list says which chats wait on a question.
function renderQuestions() {
  const view = state.current;
  const mine = view ? [...state.questions.values()].filter((q) => q.session_id === view) : [];
  $("#questions").hidden = mine.length === 0;
  $("#question-cards").replaceChildren(...mine.map((q) => renderQuestion(q, view)));
}

// -- the sessions ---------------------------------------------------------------

let sessionsTimer = null;
let reconcileAfter = null;

function refreshSessions(generation) {
  // A new connection may have missed the end of a run started before it: the list,
  // read after its ready event, says what still runs.
  if (generation !== undefined) reconcileAfter = generation;
  if (sessionsTimer) return;
  sessionsTimer = setTimeout(async () => {
    sessionsTimer = null;
    const reconcile = reconcileAfter;
    reconcileAfter = null;
    try {
      const data = await api("GET", "/v1/sessions");
      state.sessions = data.sessions || [];
      if (reconcile !== null) dropEndedRuns(reconcile);
      renderSessions();
    } catch (error) {
      notice(error.message);
    }
  }, 50);
}

const sessionIdOf = (s) => s.session_id || s.id;

function dropEndedRuns(generation) {
  const live = new Set(state.sessions.map((s) => s.running_task).filter(Boolean));
  for (const [sid, run] of [...state.runs]) {
    if (run.generation < generation && !live.has(run.hash)) {
      closeBubble(run.hash, true);
      endRun(sid, run.hash);
      if (sid === state.current) refreshTask(); // what it left pending, if anything
    }
  }
  renderRunState();
}

function describeWaits(s) {
  return (s.waiting_on || []).map((w) => {
    const who = w.who || "nobody has taken it yet";
    return `waits on ${who}: ${w.kind} “${w.prompt}”`;
  }).join("\n");
}

function describeWhen(seconds) {
  if (typeof seconds !== "number") return "";
  const when = new Date(seconds * 1000);
  const today = new Date().toDateString() === when.toDateString();
  return today ? when.toLocaleTimeString([], { hour: "2-digit", minute: "2-digit" })
    : when.toLocaleDateString([], { month: "short", day: "numeric" });
}

function renderSessions() {
  const list = $("#sessions");
  const items = state.sessions.map((s) => {
    const id = sessionIdOf(s);
    const title = s.title ? plainTitle(s.title) : "";
    if (title) state.titles.set(id, title);
    if (s.model !== undefined) state.modelOf.set(id, s.model || state.models?.default || null);
    const running = s.running || s.status === "running";
    const li = element("li", "session" + (id === state.current ? " current" : ""));
    li.dataset.session = id;
    li.dataset.status = running ? "running" : s.status || "";
    // A button, so the list is reachable and usable from the keyboard.
    const open = button("", () => showSession(id), "sid");
    if (id === state.current) open.setAttribute("aria-current", "true");
    if (title) open.append(element("span", "name", title));
    open.append(element("span", "id", id));
    li.append(open);
    // A finished session (status null) stays listed: its conversation is kept.
    li.append(element("div", "status", running ? "running" : !s.status ? "finished" :
      s.status.replace("_", " ") + (s.cause ? ` (${s.cause})` : "") +
      (s.error ? `: ${s.error}` : "")));
    const when = describeWhen(s.updated_at);
    if (when) li.append(element("div", "when", when));
    li.append(element("div", "waiting", describeWaits(s)));
    const pending = ["interrupted", "awaiting_answer", "failed", "unreadable"];
    if (!running && pending.includes(s.status)) {
      if (!(s.question && s.status === "awaiting_answer")) {
        // Another chat opens first, to show what resuming it will do by its Resume button.
        li.append(button("Resume", () => (id === state.current ? resume(id) : showSession(id)),
          "resume"));
      } else {
        li.append(button("Answer", () => showSession(id), "open"));
      }
      li.append(button("Discard", () => discard(id), "discard"));
    } else if (running && s.stoppable) {
      li.append(button("Stop", () => { showSession(id); askStop(); }, "stop"));
    }
    return li;
  });
  list.replaceChildren(...items);
  $("#no-sessions").hidden = items.length > 0;
  renderTitle();
}

// -- pending tasks --------------------------------------------------------------

let taskSeq = 0;
async function refreshTask() {
  const sid = state.current;
  const seq = ++taskSeq;
  let task = null;
  if (sid) {
    try {
      task = (await api("GET", sessionPath(sid) + "/task")).task;
    } catch (error) {
      if (error.status !== 404) notice(error.message);
    }
  }
  if (seq !== taskSeq) return; // a newer refresh is under way
  const waiting = task && !task.running && !state.runs.get(sid) && !state.sending.has(sid);
  const saved = waiting && task.status === "awaiting_answer" && task.question;
  $("#saved").hidden = !saved;
  $("#paused").hidden = !waiting || !!saved;
  if (saved) {
    // The answer names the question shown: one saved after it was shown is never answered
    // by mistake (the server refuses an answer naming a question it no longer waits for).
    const questionId = task.question.id;
    $("#saved-prompt").textContent = task.question.prompt;
    const confirm = task.question.kind === "confirm";
    $("#saved-form").hidden = confirm;
    $("#saved-form").dataset.question = questionId;
    const choices = $("#saved-choices");
    choices.hidden = !confirm;
    choices.replaceChildren(...(confirm
      ? ["allow", "allow_session", "deny"].map(
        (c) => button(CHOICE_LABELS[c], () => resume(sid, c, questionId)))
      : []));
  } else if (waiting) {
    $("#paused-text").textContent = `This session has a pending task (${task.status.replace("_", " ")}` +
      `${task.cause ? ", " + task.cause : ""}${task.error ? ": " + task.error : ""}).`;
  }
  // What resuming will do, in the server's words (the terminal's and the bots' too).
  const lines = (waiting && !saved && task.preview && task.preview.lines) || [];
  $("#paused-preview").hidden = lines.length === 0;
  $("#paused-preview-lines").replaceChildren(...lines.map((line) => {
    const li = document.createElement("li");
    li.textContent = line;
    return li;
  }));
  renderTurnActions();
}

// A run or resume request: the session is busy until it is answered, and the run it
// started is shown only if its run_ended has not come first.
async function startRequest(sid, path, body) {
  state.sending.add(sid);
  renderRunState();
  try {
    await state.choosing.get(sid); // the model chosen just before runs this
    const started = await api("POST", path, body);
    if (!state.ended.has(started.task_hash) && !state.runs.has(sid)) {
      state.runs.set(sid, {
        hash: started.task_hash, shown: false, resumed: path.endsWith("/resume"),
        generation: state.generation,
      });
    }
    return started;
  } finally {
    state.sending.delete(sid);
    if (sid === state.current) {
      renderRunState();
      refreshTask(); // a run that ended before this answer may have left a pending task
    }
  }
}

async function resume(sid, answerText, questionId) {
  if (sid !== state.current) showSession(sid);
  $("#saved").hidden = true;
  $("#paused").hidden = true;
  const body = answerText === undefined ? undefined
    : questionId ? { answer: answerText, question_id: questionId } : { answer: answerText };
  const mine = answerText !== undefined ? add(sid, "user", answerText) : null;
  try {
    await startRequest(sid, sessionPath(sid) + "/task/resume", body);
  } catch (error) {
    mine?.remove();
    notice(error.message);
    if (sid === state.current) refreshTask();
  }
}

// Put back the files the session's last run changed (POST /v1/sessions/{id}/undo). Files
// changed since the run are listed and asked about: going on keeps their newer content beside.
async function undo(sid, force = false) {
  try {
    const path = `/v1/sessions/${encodeURIComponent(sid)}/undo`;
    const done = await api("POST", path, force ? { force: true } : {});
    if (!done.done && done.conflicts.length) {
      const ask = `${done.conflicts.length} file(s) changed since the run:\n`
        + `${done.conflicts.join("\n")}\n\nPut them back anyway? Their newer content `
        + "is kept beside each one.";
      if (window.confirm(ask)) await undo(sid, true);
      else add(sid, "status", "nothing was undone: files changed since the run");
      return;
    }
    if (!done.restored.length) {
      add(sid, "status", "nothing to undo");
      return;
    }
    const lines = done.restored.map((p) => (done.kept[p] ? `${p} (its newer content kept in ${done.kept[p]})` : p));
    add(sid, "status", `put back ${done.restored.length} file(s): ${lines.join(", ")}`);
  } catch (error) {
    notice(error.message);
  }
}

async function discard(sid) {
  try {
    await api("DELETE", sessionPath(sid) + "/task");
    add(sid, "status", "the pending task was discarded");
    refreshSessions();
    if (sid === state.current) refreshTask();
  } catch (error) {
    notice(error.message);
  }
}

// -- sending and stopping --------------------------------------------------------

async function send(text) {
  if (!text.trim()) return;
  if (state.editing && state.editing === state.current) {
    await redo(text);
    return;
  }
  if (!state.current) showSession(newSessionId());
  const sid = state.current;
  if (state.sending.has(sid) || state.runs.has(sid)) return; // Send is disabled meanwhile
  notice("");
  // The message shows at once, so it always comes before the reply.
  const mine = addTurn(sid, text);
  $("#input").value = "";
  try {
    await startRequest(sid, sessionPath(sid) + "/run", { text });
  } catch (error) {
    mine.remove();
    if (!$("#input").value) $("#input").value = text;
    notice(error.code === "pending_task_exists"
      ? "This session has a pending task: resume or discard it first."
      : error.message);
  }
}

let stopTarget = null; // {sid, hash} of the run the stop dialog is about

function askStop() {
  const sid = state.current;
  const run = sid && state.runs.get(sid);
  if (!run) return;
  stopTarget = { sid, hash: run.hash };
  const dialog = $("#stop-dialog");
  dialog.returnValue = ""; // Esc closes it with this: keep running
  dialog.showModal();
}

async function cancelRun(hash, cause) {
  try {
    await api("POST", `/v1/task/${encodeURIComponent(hash)}/cancel`, { cause });
  } catch (error) {
    // unknown_task: the run ended meanwhile, and its run_ended says how.
    if (error.code !== "unknown_task") notice(error.message);
  }
}

function stop(choice) {
  const target = stopTarget;
  stopTarget = null;
  if (!target || (choice !== "yes" && choice !== "pause")) return;
  const run = state.runs.get(target.sid);
  if (!run || run.hash !== target.hash) return; // it ended while the dialog was open
  cancelRun(target.hash, choice === "pause" ? "pause" : "user_cancel");
}

// Esc, as in the terminal: close what is open, else stop the run of the open
// session: at once (a user-cancel) if nothing of it was shown yet, else ask.
function onEscape(e) {
  if (e.key !== "Escape" || e.defaultPrevented || $("#stop-dialog").open) return;
  if (PHONE.matches && document.body.dataset.sidebar === "open") {
    setSidebar(false);
    return;
  }
  if (!$("#notice").hidden) {
    notice("");
    return;
  }
  const run = state.current && state.runs.get(state.current);
  if (!run) return;
  e.preventDefault();
  if (run.shown || run.resumed) askStop();
  else cancelRun(run.hash, "user_cancel");
}

// -- the sidebar ----------------------------------------------------------------

function setSidebar(open) {
  document.body.dataset.sidebar = open ? "open" : "closed";
  $("#toggle-sidebar").setAttribute("aria-expanded", open ? "true" : "false");
}

// -- logging in and out ------------------------------------------------------------

function showLogin(message) {
  document.body.dataset.auth = "out";
  $("#login").hidden = false;
  $("#login-error").textContent = message || "";
  $("#login-error").hidden = !message;
  $("#token").focus();
}

function logOut(message) {
  token = "";
  sessionStorage.removeItem(TOKEN_KEY);
  if (stream) stream.abort();
  stream = null;
  showLogin(message);
}

async function logIn(candidate) {
  const tried = candidate.trim();
  if (!tried) return;
  token = tried;
  let response;
  try {
    response = await request("/v1/sessions");
  } catch (error) {
    token = "";
    showLogin(`The server cannot be reached: ${error.message}`);
    return;
  }
  if (!response.ok) {
    token = "";
    showLogin(response.status === 401
      ? "That token is not this server's. Run 'agentrt token' to print it."
      : `The server answered ${response.status}.`);
    return;
  }
  sessionStorage.setItem(TOKEN_KEY, token);
  $("#token").value = "";
  start();
}

function start() {
  document.body.dataset.auth = "in";
  $("#login").hidden = true;
  setSidebar(!PHONE.matches);
  // The open session survives a reload: the address names it, and so does this tab.
  const fromHash = decodeURIComponent(location.hash.slice(1));
  showSession(fromHash || sessionStorage.getItem(SESSION_KEY) || null);
  loadModels();
  connect();
}

function init() {
  $("#login-form").addEventListener("submit", (e) => {
    e.preventDefault();
    logIn($("#token").value);
  });
  $("#log-out").addEventListener("click", () => logOut(""));
  $("#composer").addEventListener("submit", (e) => {
    e.preventDefault();
    if (!$("#send").disabled) send($("#input").value);
  });
  $("#input").addEventListener("keydown", (e) => {
    if (e.key === "Enter" && !e.shiftKey && !e.isComposing) {
      e.preventDefault();
      if (!$("#send").disabled) send($("#input").value);
    }
  });
  $("#new-chat").addEventListener("click", () => showSession(newSessionId()));
  $("#stop").addEventListener("click", askStop);
  $("#undo").addEventListener("click", () => undo(state.current));
  $("#stop-dialog").addEventListener("close", () => {
    // A close event is dispatched later than the close itself: one that comes after the
    // dialog was opened again (Esc right after No) belongs to the earlier question, and
    // must not take the new one's target with it.
    if ($("#stop-dialog").open) return;
    stop($("#stop-dialog").returnValue);
  });
  $("#stop-dialog").addEventListener("keydown", (e) => {
    const choice = { y: "yes", p: "pause", n: "no" }[e.key.toLowerCase()];
    if (choice) {
      e.preventDefault();
      $("#stop-dialog").close(choice);
    }
  });
  document.addEventListener("keydown", onEscape);
  $("#toggle-sidebar").addEventListener("click", () => {
    setSidebar(document.body.dataset.sidebar !== "open");
  });
  $("#backdrop").addEventListener("click", () => setSidebar(false));
  PHONE.addEventListener("change", () => setSidebar(!PHONE.matches));
  document.querySelector(".skip").addEventListener("click", (e) => {
    e.preventDefault();
    $("#input").focus();
  });
  $("#saved-form").addEventListener("submit", (e) => {
    e.preventDefault();
    resume(state.current, $("#saved-answer").value, e.target.dataset.question);
    $("#saved-answer").value = "";
  });
  $("#model").addEventListener("change", (e) => chooseModel(e.target.value));
  $("#regenerate").addEventListener("click", () => redo());
  $("#edit-last").addEventListener("click", startEditing);
  $("#cancel-edit").addEventListener("click", stopEditing);
  $("#paused-resume").addEventListener("click", () => resume(state.current));
  $("#paused-discard").addEventListener("click", () => discard(state.current));
  if (token) start();
  else showLogin("");
}

init();
