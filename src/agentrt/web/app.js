// The web chat of agentrt: talks to the HTTP API of the server that served it.
//
// The page carries no ambient credential. The token is typed into the page once
// and kept in sessionStorage, which belongs to this origin alone (scheme, host
// and port: another server on this machine cannot read it) and ends with the
// tab. Every request sends it in the Authorization header itself, with
// credentials "omit", so the browser never attaches a cookie or a login of its
// own; the event stream is read with fetch() for the same reason (EventSource
// cannot send a header).
"use strict";

const $ = (sel) => document.querySelector(sel);

const state = {
  current: null, // the open session id
  runs: new Map(), // session id -> task hash of its run started here, while it runs
  logs: new Map(), // session id -> the log element of that session
  bubbles: new Map(), // task hash -> the assistant bubble being streamed
  thoughts: new Map(), // task hash -> the reasoning bubble being streamed (shown dimmed)
  questions: new Map(), // question id -> question
  sessions: [],
};

const TOKEN_KEY = "agentrt.token";
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
  return "chat-" + Array.from(bytes, (b) => b.toString(16).padStart(2, "0")).join("");
}

// -- the conversation log ---------------------------------------------------

function logOf(sid) {
  let log = state.logs.get(sid);
  if (!log) {
    log = document.createElement("div");
    log.className = "session-log";
    log.dataset.session = sid;
    state.logs.set(sid, log);
  }
  return log;
}

function add(sid, kind, text) {
  const el = document.createElement("div");
  el.className = `msg ${kind}`;
  el.textContent = text;
  logOf(sid).append(el);
  if (sid === state.current) el.scrollIntoView({ block: "end" });
  return el;
}

function showSession(sid) {
  state.current = sid;
  if (sid) history.replaceState(null, "", "#" + encodeURIComponent(sid));
  $("#session-title").textContent = sid || "New chat";
  const log = $("#log");
  log.replaceChildren(sid ? logOf(sid) : document.createTextNode(""));
  notice("");
  renderRunState();
  renderSessions();
  renderQuestions();
  refreshTask();
}

function renderRunState() {
  const sid = state.current;
  const hash = sid && state.runs.get(sid);
  $("#stop").hidden = !hash;
  $("#run-state").textContent = hash ? `running (task ${hash})` : "";
}

// -- events -----------------------------------------------------------------

const handlers = {
  ready(ev) {
    state.questions = new Map(ev.questions.map((q) => [q.id, q]));
    renderQuestions();
    refreshSessions();
    refreshTask();
  },
  task_started(ev) {
    state.runs.set(ev.session_id, ev.task_hash);
    add(ev.session_id, "status", ev.resumed ? "resumed the pending task" : "run started");
    if (ev.session_id === state.current) renderRunState();
    refreshSessions();
    if (ev.session_id === state.current) refreshTask();
  },
  reasoning(ev) {
    let bubble = state.thoughts.get(ev.task_hash);
    if (!bubble) {
      bubble = add(ev.session_id, "reasoning", "");
      state.thoughts.set(ev.task_hash, bubble);
    }
    bubble.textContent += ev.text;
    if (ev.session_id === state.current) bubble.scrollIntoView({ block: "end" });
  },
  text(ev) {
    state.thoughts.delete(ev.task_hash); // reasoning after this text starts a new bubble
    let bubble = state.bubbles.get(ev.task_hash);
    if (!bubble) {
      bubble = add(ev.session_id, "assistant", "");
      state.bubbles.set(ev.task_hash, bubble);
    }
    bubble.textContent += ev.text;
    if (ev.session_id === state.current) bubble.scrollIntoView({ block: "end" });
  },
  tool_call(ev) {
    state.bubbles.delete(ev.task_hash);
    state.thoughts.delete(ev.task_hash);
    const args = Object.entries(ev.arguments)
      .map(([k, v]) => `${k}=${JSON.stringify(v)}`)
      .join(" ");
    add(ev.session_id, "tool", `→ ${ev.name} ${args}`);
  },
  tool_result(ev) {
    add(ev.session_id, "tool", `${ev.ok ? "✓" : "✗"} ${ev.name}: ${ev.preview}`);
  },
  verify(ev) {
    add(ev.session_id, "status", ev.message);
  },
  usage() {},
  run_ended(ev) {
    state.bubbles.delete(ev.task_hash);
    state.thoughts.delete(ev.task_hash);
    if (state.runs.get(ev.session_id) === ev.task_hash) state.runs.delete(ev.session_id);
    // The server words the end (the same words as the terminal and the bots);
    // the page adds only how to go on here.
    const resumable = ev.pending_kept && ev.outcome !== "awaiting_answer";
    add(ev.session_id, "status", ev.summary + (resumable ? ": resume it when you like" : ""));
    if (ev.session_id === state.current) renderRunState();
    refreshSessions();
    if (ev.session_id === state.current) refreshTask();
  },
  question(ev) {
    state.questions.set(ev.id, ev);
    renderQuestions();
    refreshSessions();
  },
  question_closed(ev) {
    state.questions.delete(ev.id);
    renderQuestions();
    refreshSessions();
  },
};

// The live stream: server-sent events read with fetch(), reconnecting after a second.
let stream = null; // the AbortController of the running stream

function setLive(live) {
  $("#conn").textContent = live ? "live" : "reconnecting";
  $("#conn").classList.toggle("live", live);
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
      const data = block.split("\n")
        .filter((line) => line.startsWith("data:"))
        .map((line) => line.slice(5).replace(/^ /, ""))
        .join("\n");
      if (!data) continue; // a keep-alive comment or a retry hint
      const ev = JSON.parse(data);
      const handler = handlers[ev.type];
      if (handler) handler(ev);
    }
  }
}

async function connect() {
  if (stream) stream.abort();
  const controller = new AbortController();
  stream = controller;
  while (!controller.signal.aborted) {
    try {
      const response = await request("/v1/events", {
        headers: { Accept: "text/event-stream" },
        signal: controller.signal,
      });
      if (response.status === 401) {
        logOut("The server no longer accepts the token: log in again.");
        return;
      }
      if (!response.ok || !response.body) throw new Error(`HTTP ${response.status}`);
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

async function answer(q, value, secret) {
  try {
    await api("POST", `/v1/questions/${encodeURIComponent(q.id)}/answer`,
      secret === undefined ? { value } : { value, secret });
    state.questions.delete(q.id);
    renderQuestions();
  } catch (error) {
    notice(error.message);
  }
}

function renderQuestion(q) {
  const card = document.createElement("div");
  card.className = "question";
  card.dataset.id = q.id;
  card.dataset.kind = q.kind;
  const meta = document.createElement("div");
  meta.className = "meta";
  meta.textContent = `${q.session_id}${q.agent ? " / " + q.agent : ""} asks` +
    (q.tool ? ` (${q.tool})` : "");
  const prompt = document.createElement("p");
  prompt.className = "prompt";
  prompt.textContent = q.prompt;
  card.append(meta, prompt);
  if (q.error) {
    const error = document.createElement("p");
    error.className = "error";
    error.textContent = q.error;
    card.append(error);
  }
  if (q.kind === "confirm") {
    for (const choice of q.choices) {
      card.append(button(CHOICE_LABELS[choice] || choice, () => answer(q, choice)));
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
      answer(q, input.value);
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
      answer(q, q.kind === "password" ? "allow" : "store", value);
    }));
    card.append(button(q.kind === "password" ? "Deny" : "Decline", () => answer(q, "deny")));
  }
  return card;
}

function renderQuestions() {
  const box = $("#questions");
  const mine = [...state.questions.values()];
  // The open session's questions first; the others still show, so nothing waits unseen.
  mine.sort((a, b) => (b.session_id === state.current) - (a.session_id === state.current));
  box.replaceChildren(...mine.map(renderQuestion));
}

// -- pending tasks --------------------------------------------------------------

let sessionsTimer = null;
function refreshSessions() {
  if (sessionsTimer) return;
  sessionsTimer = setTimeout(async () => {
    sessionsTimer = null;
    try {
      state.sessions = (await api("GET", "/v1/sessions")).sessions;
      renderSessions();
    } catch (error) {
      notice(error.message);
    }
  }, 50);
}

function describeWaits(s) {
  return (s.waiting_on || []).map((w) => {
    const who = w.who || "nobody has taken it yet";
    return `waits on ${who}: ${w.kind} “${w.prompt}”`;
  }).join("\n");
}

function renderSessions() {
  const list = $("#sessions");
  const items = state.sessions.map((s) => {
    const li = document.createElement("li");
    li.className = "session" + (s.session_id === state.current ? " current" : "");
    li.dataset.session = s.session_id;
    // A finished session (status null) stays listed: its conversation is kept.
    li.dataset.status = s.running ? "running" : s.status || "";
    const sid = document.createElement("div");
    sid.className = "sid";
    sid.textContent = s.session_id;
    sid.addEventListener("click", () => showSession(s.session_id));
    const status = document.createElement("div");
    status.className = "status";
    status.textContent = s.running ? "running" : !s.status ? "finished" :
      s.status.replace("_", " ") + (s.cause ? ` (${s.cause})` : "") +
      (s.error ? `: ${s.error}` : "");
    const waiting = document.createElement("div");
    waiting.className = "waiting";
    waiting.textContent = describeWaits(s);
    li.append(sid, status, waiting);
    if (!s.running && s.status) {
      if (!(s.question && s.status === "awaiting_answer")) {
        li.append(button("Resume", () => resume(s.session_id), "resume"));
      } else {
        li.append(button("Answer", () => showSession(s.session_id), "open"));
      }
      li.append(button("Discard", () => discard(s.session_id), "discard"));
    } else if (s.stoppable) {
      li.append(button("Stop", () => { showSession(s.session_id); askStop(); }, "stop"));
    }
    return li;
  });
  list.replaceChildren(...items);
  $("#no-sessions").hidden = items.length > 0;
}

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
  const waiting = task && !task.running && !state.runs.get(sid);
  const saved = waiting && task.status === "awaiting_answer" && task.question;
  $("#saved").hidden = !saved;
  $("#paused").hidden = !waiting || !!saved;
  if (saved) {
    $("#saved-prompt").textContent = task.question.prompt;
    const confirm = task.question.kind === "confirm";
    $("#saved-form").hidden = confirm;
    const choices = $("#saved-choices");
    choices.hidden = !confirm;
    choices.replaceChildren(...(confirm
      ? ["allow", "allow_session", "deny"].map((c) => button(CHOICE_LABELS[c], () => resume(sid, c)))
      : []));
  } else if (waiting) {
    $("#paused-text").textContent = `This session has a pending task (${task.status.replace("_", " ")}` +
      `${task.cause ? ", " + task.cause : ""}${task.error ? ": " + task.error : ""}).`;
  }
}

async function resume(sid, answerText) {
  if (sid !== state.current) showSession(sid);
  try {
    const body = answerText === undefined ? undefined : { answer: answerText };
    if (answerText !== undefined) add(sid, "user", answerText);
    const started = await api("POST", sessionPath(sid) + "/task/resume", body);
    state.runs.set(sid, started.task_hash);
    renderRunState();
    $("#saved").hidden = true;
    $("#paused").hidden = true;
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
  if (!state.current) showSession(newSessionId());
  const sid = state.current;
  try {
    const started = await api("POST", sessionPath(sid) + "/run", { text });
    add(sid, "user", text);
    $("#input").value = "";
    state.runs.set(sid, started.task_hash);
    renderRunState();
  } catch (error) {
    notice(error.code === "pending_task_exists"
      ? "This session has a pending task: resume or discard it first."
      : error.message);
  }
}

function askStop() {
  if (!state.runs.get(state.current)) return;
  const dialog = $("#stop-dialog");
  dialog.returnValue = ""; // Esc closes it with this: keep running
  dialog.showModal();
}

async function stop(choice) {
  const hash = state.runs.get(state.current);
  if (!hash || choice === "no") return;
  try {
    await api("POST", `/v1/task/${encodeURIComponent(hash)}/cancel`, { pause: choice === "pause" });
  } catch (error) {
    notice(error.message);
  }
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
  const fromHash = decodeURIComponent(location.hash.slice(1));
  showSession(fromHash || null);
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
    send($("#input").value);
  });
  $("#input").addEventListener("keydown", (e) => {
    if (e.key === "Enter" && !e.shiftKey) {
      e.preventDefault();
      send($("#input").value);
    }
  });
  $("#new-chat").addEventListener("click", () => showSession(newSessionId()));
  $("#stop").addEventListener("click", askStop);
  $("#stop-dialog").addEventListener("close", () => stop($("#stop-dialog").returnValue));
  $("#saved-form").addEventListener("submit", (e) => {
    e.preventDefault();
    resume(state.current, $("#saved-answer").value);
    $("#saved-answer").value = "";
  });
  $("#paused-resume").addEventListener("click", () => resume(state.current));
  $("#paused-discard").addEventListener("click", () => discard(state.current));
  if (token) start();
  else showLogin("");
}

init();
