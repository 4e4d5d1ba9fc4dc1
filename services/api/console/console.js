// Herald's operator console: plain modules, no framework, nothing fetched from elsewhere.
// Every data call carries the API key kept in sessionStorage; the server enforces every scope,
// the console only hides what the key may not do.

const KEY_STORE = "herald.apiKey";
const FINAL = new Set(["completed", "failed", "cancelled", "missed"]);
const STATUSES = ["awaiting_approval", "scheduled", "pending", "in_progress", "paused",
  "finalizing", "cancelling",
  "completed", "failed", "cancelled", "missed"];
const LIST_REFRESH_MS = 1000;
const PODS_REFRESH_MS = 2000;
const RECONNECT_MS = 1000;
const ESTIMATE_DELAY_MS = 350;
const ETA_REFRESH_MS = 2000;
const SENDING = new Set(["pending", "in_progress"]);

// Mirrors herald/domain/payload.py: what FCM would refuse, refused as you type.
const MAX_PAYLOAD_BYTES = 4096;
const DATA_KEY = /^[a-z][A-Za-z0-9]{0,127}$/;
const RESERVED_KEYS = new Set(["from", "notification", "message_type", "collapse_key"]);
const RESERVED_PREFIXES = ["google", "gcm"];
const LONGEST_DEFAULT_KEY = "herald-" + "0".repeat(24);
const WEB_PUSH_TOPIC = /^[A-Za-z0-9_-]{1,32}$/;

const numberFormat = new Intl.NumberFormat();
const fmt = (n) => numberFormat.format(n);

let session = { key: null, me: null };
let page = new AbortController();

// --- small DOM helpers (text only: nothing from the server is parsed as HTML) -------------------
function h(tag, attrs = {}, ...children) {
  const el = document.createElement(tag);
  for (const [name, value] of Object.entries(attrs)) {
    if (value === undefined || value === null || value === false) continue;
    if (name.startsWith("on")) el.addEventListener(name.slice(2), value);
    else if (name === "text") el.textContent = value;
    else if (value === true) el.setAttribute(name, "");
    else el.setAttribute(name, value);
  }
  for (const child of children.flat()) {
    if (child === null || child === undefined || child === false) continue;
    el.append(child instanceof Node ? child : String(child));
  }
  return el;
}
const $ = (selector, root = document) => root.querySelector(selector);
const can = (scope) => Boolean(session.me && session.me.scopes.includes(scope));
const label = (c) => c.name || c.title;

function localTime(iso) {
  return iso ? new Date(iso).toLocaleString() : "—";
}

// A moment people in several places read: the operator's own clock, then UTC.
function bothTimes(iso) {
  const utc = new Date(iso).toISOString().slice(0, 19).replace("T", " ");
  return `${localTime(iso)} your time (${utc} UTC)`;
}

function notify(message, ok = false) {
  const box = $("#notice");
  box.textContent = message;
  box.className = ok ? "notice ok" : "notice";
  box.hidden = !message;
}

// --- the API ---------------------------------------------------------------------------------
class ApiFailure extends Error {
  constructor(status, code, message) {
    super(message);
    this.status = status;
    this.code = code;
  }
}

async function failureOf(response) {
  let body = null;
  try { body = await response.json(); } catch { /* not JSON */ }
  const error = body && body.error ? body.error : {};
  return new ApiFailure(response.status, error.code || "http_" + response.status,
    error.message || response.statusText);
}

function authorization() {
  return { Authorization: "Bearer " + session.key };
}

async function call(method, path, body, headers = {}, signal = page.signal) {
  const init = { method, headers: { ...authorization(), ...headers }, signal };
  if (body !== undefined) {
    init.headers["Content-Type"] = "application/json";
    init.body = JSON.stringify(body);
  }
  const response = await fetch(path, init);
  if (!response.ok) {
    const failure = await failureOf(response);
    if (failure.status === 401) signOut("The key is no longer valid: sign in again.");
    throw failure;
  }
  return response;
}
const get = async (path) => (await call("GET", path)).json();
const post = async (path, body, headers) => (await call("POST", path, body, headers)).json();

function reportFailure(error) {
  if (error.name === "AbortError") return;
  notify(error instanceof ApiFailure ? `${error.message} (${error.code})` : String(error));
}

// A poll that never overlaps itself and stops with the page.
function every(ms, task) {
  const signal = page.signal;
  const run = async () => {
    if (signal.aborted) return;
    try { await task(); } catch (error) { reportFailure(error); }
    if (!signal.aborted) setTimeout(run, ms);
  };
  run();
}

// --- server-sent events over fetch (EventSource cannot send an Authorization header) ----------
async function watchCampaign(id, onCampaign, onState) {
  const signal = page.signal;
  while (!signal.aborted) {
    try {
      const response = await fetch(`/v1/campaigns/${id}/events`, { headers: authorization(), signal });
      if (!response.ok) throw await failureOf(response);
      onState("live");
      if (await readEvents(response, onCampaign)) return;
    } catch (error) {
      if (signal.aborted) return;
      if (error instanceof ApiFailure && error.status === 401) { signOut("The key is no longer valid: sign in again."); return; }
      if (error instanceof ApiFailure && error.status < 500) { reportFailure(error); return; }
    }
    onState("reconnecting");
    await new Promise((resolve) => setTimeout(resolve, RECONNECT_MS));
  }
}

// Reads one stream; true once it delivered a campaign in a final status.
async function readEvents(response, onCampaign) {
  const reader = response.body.pipeThrough(new TextDecoderStream()).getReader();
  let buffer = "";
  for (;;) {
    const { value, done } = await reader.read();
    if (done) return false;
    buffer += value.replace(/\r\n/g, "\n");
    let end;
    while ((end = buffer.indexOf("\n\n")) >= 0) {
      const campaign = parseEvent(buffer.slice(0, end));
      buffer = buffer.slice(end + 2);
      if (campaign) {
        onCampaign(campaign);
        if (FINAL.has(campaign.status)) return true;
      }
    }
  }
}

function parseEvent(block) {
  const data = block.split("\n").filter((line) => line.startsWith("data:"))
    .map((line) => line.slice(5).trimStart()).join("\n");
  return data ? JSON.parse(data) : null;
}

// --- sign-in -----------------------------------------------------------------------------------
async function signIn(key) {
  session.key = key;
  try {
    // Not tied to the page: leaving the sign-in page must not cancel the sign-in.
    session.me = await (await call("GET", "/v1/me", undefined, {}, undefined)).json();
  } catch (error) {
    session = { key: null, me: null };
    throw error;
  }
  sessionStorage.setItem(KEY_STORE, key);
  showIdentity();
}

function signOut(message) {
  sessionStorage.removeItem(KEY_STORE);
  session = { key: null, me: null };
  showIdentity();
  navigate("#/signin");
  if (message) notify(message);
}

function navigate(hash) {
  if (location.hash === hash) route();
  else location.hash = hash;
}

function showIdentity() {
  const signedIn = Boolean(session.me);
  $("#nav").hidden = !signedIn;
  $("#who").hidden = !signedIn;
  if (!signedIn) return;
  $("#who-name").textContent = session.me.name;
  $("#who-role").textContent = session.me.role;
  for (const link of document.querySelectorAll("#nav [data-scope]")) {
    link.hidden = !can(link.dataset.scope);
  }
}

function signInPage(main) {
  const input = h("input", { type: "password", id: "api-key", autocomplete: "off", required: true,
    placeholder: "hrld_…" });
  const form = h("form", { class: "panel signin", onsubmit: async (event) => {
    event.preventDefault();
    try {
      await signIn(input.value.trim());
      notify("");
      navigate(location.hash === "#/signin" || !location.hash ? "#/campaigns" : location.hash);
    } catch (error) {
      notify(error.status === 401 ? "That key is not valid." : String(error.message));
    }
  } },
  h("h1", { text: "Sign in" }),
  h("p", { class: "hint", text: "Paste an API key. It is kept for this browser tab only and sent with every call." }),
  h("label", { for: "api-key", text: "API key" }), input,
  h("p", {}, h("button", { type: "submit", class: "primary", text: "Sign in" })));
  main.append(form);
  input.focus();
}

// --- campaigns ---------------------------------------------------------------------------------
function progressBar(counts, big = false) {
  const total = Math.max(counts.targeted, 1);
  const share = (n) => `${(100 * n / total).toFixed(2)}%`;
  return h("div", { class: big ? "progress big" : "progress", role: "img",
    "aria-label": `${fmt(counts.sent)} sent, ${fmt(counts.failed)} failed, ` +
      `${fmt(counts.suppressed || 0)} suppressed of ${fmt(counts.targeted)}` },
  widthOf(h("div", { class: "sent" }), share(counts.sent)),
  widthOf(h("div", { class: "failed" }), share(counts.failed)),
  widthOf(h("div", { class: "suppressed" }), share(counts.suppressed || 0)));
}

// Through the CSSOM: the console's Content-Security-Policy refuses inline style attributes.
function widthOf(el, width) {
  el.style.width = width;
  return el;
}

const statusBadge = (status) => h("span", { class: `status ${status}`, text: status.replace("_", " ") });
// Which campaigns go first when several send at once (herald/domain/lanes.py).
const LANES = {
  urgent: "urgent — before everything (an outage notice, a security alert)",
  standard: "standard — the default",
  bulk: "bulk — what the others leave",
};
const laneBadge = (lane) => h("span", { class: `lane ${lane || "standard"}`, "data-lane": lane || "standard",
  title: LANES[lane || "standard"], text: lane || "standard" });

// Why a campaign is sent, and so who it may reach (herald/domain/purpose.py); null: a campaign
// created before purposes, which reaches what its audience says.
const PURPOSES = {
  marketing: "marketing — only devices opted in to marketing",
  transactional: "transactional — also devices opted out of marketing (push enabled)",
  legacy: "legacy — created before purposes: reaches what its audience says",
};
const purposeBadge = (purpose) => h("span", { class: `purpose ${purpose || "legacy"}`,
  "data-purpose": purpose || "legacy", title: PURPOSES[purpose || "legacy"], text: purpose || "legacy" });

function campaignsPage(main) {
  const filter = h("select", { id: "status-filter", onchange: () => refresh() },
    h("option", { value: "", text: "every status" }),
    STATUSES.map((s) => h("option", { value: s, text: s.replace("_", " ") })));
  const body = h("tbody");
  main.append(h("div", { class: "head" }, h("h1", { text: "Campaigns" }),
    h("label", { class: "row" }, "Show ", filter)),
  h("table", { id: "campaigns" }, h("thead", {}, h("tr", {},
    ["Campaign", "Status", "Lane", "Purpose", "Created", "Progress"].map((t) => h("th", { text: t })),
    ["Sent", "Failed", "Unsent", "Suppressed", "Targeted"].map((t) => h("th", { class: "num", text: t })))), body));
  const refresh = async () => {
    const query = filter.value ? `&status=${filter.value}` : "";
    const listed = await get(`/v1/campaigns?limit=50${query}`);
    body.replaceChildren(...listed.items.map(campaignRow));
    if (!listed.items.length) body.append(h("tr", {}, h("td", { colspan: 11, class: "muted", text: "No campaigns." })));
  };
  every(LIST_REFRESH_MS, refresh);
}

function campaignRow(c) {
  const open = () => { location.hash = `#/campaigns/${c.id}`; };
  const n = c.counts;
  return h("tr", { class: "row-link", "data-id": c.id, onclick: open },
    h("td", {}, h("a", { href: `#/campaigns/${c.id}`, text: label(c) })),
    h("td", {}, statusBadge(c.status)),
    h("td", {}, laneBadge(c.lane)),
    h("td", {}, purposeBadge(c.purpose)),
    h("td", { text: localTime(c.created_at) }),
    h("td", {}, progressBar(n)),
    [n.sent, n.failed, n.unsent, n.suppressed || 0, n.targeted].map((v) => h("td", { class: "num", text: fmt(v) })));
}

// --- one campaign ------------------------------------------------------------------------------
function campaignPage(main, id) {
  const view = { campaign: null, stopRequested: false };
  const parts = {
    title: h("h1"), status: h("span"), meta: h("p", { class: "muted" }), bar: h("div"),
    rules: h("p", { class: "rules-line", id: "rules-shown" }),
    counts: h("dl", { class: "counts" }), stop: h("div"), stopped: h("div"),
    live: h("span", { class: "muted", id: "stream-state" }),
    timeline: h("ol", { class: "timeline", id: "timeline" }), followUps: h("div"),
    approval: h("div", { id: "approval" }), eta: h("p", { class: "forecast", id: "eta", hidden: true }),
    hold: h("div"), rollout: h("section", { class: "panel", id: "rollout", hidden: true }),
  };
  // Approve: only for keys whose role may approve; disabled, with why, for the creator's own.
  parts.approveButton = can("campaigns:approve") ? h("button", { type: "button", class: "primary",
    id: "approve", onclick: () => approveCampaign(parts, view) }, "✓ Approve") : null;
  parts.testSend = can("campaigns:send") ? testSendForm(id) : null;
  // One button for the page's life (re-rendering it on every event could eat a click), and
  // none at all for a key that may not cancel.
  parts.stopButton = can("campaigns:cancel") ? h("button", { type: "button", class: "stop", id: "stop",
    hidden: true, onclick: () => confirmStop(parts, view) }, "■ Stop sending") : null;
  if (parts.stopButton) parts.stop.append(parts.stopButton);
  addHoldButtons(parts, view);
  main.append(h("section", { class: "panel" },
    h("div", { class: "head" }, h("div", {}, parts.title, h("p", {}, parts.status, " ", parts.live), parts.meta, parts.rules), parts.stop),
    parts.stopped, parts.approval, parts.bar, parts.eta, parts.counts),
  parts.rollout,
  parts.followUps,
  parts.testSend || "",
  h("section", { class: "panel" }, h("h2", { text: "Timeline" }), parts.timeline),
  h("section", { class: "panel" }, h("h2", { text: "Audit" }), downloads(id)));
  const update = (campaign) => {
    const first = view.campaign === null;
    view.campaign = campaign;
    renderCampaign(parts, view);
    if (first) refreshEta(parts, view, id).catch(reportFailure);
    if (first || FINAL.has(campaign.status)) renderFollowUps(parts.followUps, campaign);
  };
  watchCampaign(id, update, (state) => {
    parts.live.textContent = state === "live" ? "" : "reconnecting…";
  });
  const signal = page.signal;  // the first is read with the first event; then every few seconds
  setTimeout(() => { if (!signal.aborted) every(ETA_REFRESH_MS, () => refreshEta(parts, view, id)); },
    ETA_REFRESH_MS);
}

// While it sends, when its last recipient is expected (GET /v1/campaigns/{id}: eta, never before
// quiet hours let the last held one go, shown above it); the event stream carries no forecast,
// so it is read apart, every few seconds.
async function refreshEta(parts, view, id) {
  if (!view.campaign || !SENDING.has(view.campaign.status)) { parts.eta.hidden = true; return; }
  const { eta } = await get(`/v1/campaigns/${id}`);
  parts.eta.hidden = !eta;
  if (!eta) return;
  parts.eta.textContent = eta.finishes_in_s === null
    ? "Nothing is sending it now: no sender is alive, or nothing is left for its lane."
    : `Last recipient expected ${within(eta.finishes_in_s)} (${localTime(eta.finishes_at)}), ` +
      `the fleet sending ${fmt(Math.round(eta.fleet_rate_per_s))}/s${eta.fleet_rate_measured ? "" : " (assumed)"}.`;
}

function renderCampaign(parts, view) {
  const c = view.campaign;
  parts.title.textContent = label(c);
  parts.status.replaceChildren(statusBadge(c.status), " ", laneBadge(c.lane), " ", purposeBadge(c.purpose));
  const tags = Object.keys(c.translations || {});
  parts.meta.textContent = `${c.title} — ${c.body}` + (tags.length ? ` (also in ${tags.join(", ")})` : "");
  parts.rules.replaceChildren(...personRulesShown(c));
  parts.bar.replaceChildren(progressBar(c.counts, true));
  if (!SENDING.has(c.status)) parts.eta.hidden = true;  // no forecast once it stopped sending
  // Suppressed: held back by a rule (the frequency cap), never sent; in the audit with the rule.
  parts.counts.replaceChildren(...[["targeted", "Targeted"], ["sent", "Sent"], ["failed", "Failed"],
    ["unsent", "Unsent"], ["suppressed", "Suppressed"]].map(([k, t]) => h("div", { class: k },
    h("dt", { text: t }), h("dd", { id: `count-${k}`, text: fmt(c.counts[k] || 0) }))));
  const steps = timeline(c);
  const seen = steps.map((li) => li.textContent).join("|");
  if (seen !== parts.timelineSeen) {  // unchanged: keep the links under the pointer
    parts.timelineSeen = seen;
    parts.timeline.replaceChildren(...steps);
  }
  renderStop(parts, view);
  renderApproval(parts, view);
  // Whether a test send is allowed is the server's one rule (TESTABLE), shown as `testable`.
  if (parts.testSend) parts.testSend.hidden = !c.testable;
  renderHold(parts, c);
  renderRollout(parts, c);
  if (view.toGo) view.toGo.textContent = stillToGo(c);
  if (view.closeDialog && FINAL.has(c.status)) {
    view.closeDialog();
    notify(`“${label(c)}” is ${c.status}: there is nothing left to stop.`, true);
  }
}

// A marketing campaign's quiet hours and frequency cap as it was created (GET /v1/campaigns/{id}:
// quiet_hours, null for the setting's, held; frequency_cap, null for the setting's), and until
// when quiet hours hold some of its recipients (quiet_hours_until, once its dispatcher planned).
function personRulesShown(c) {
  if (c.purpose !== "marketing") return [];
  const q = c.quiet_hours || {};
  const mode = q.mode === "skip" ? "skipped (suppressed)" : "held until they end";
  const quiet = q.window === "off" ? "off"
    : `${q.window ? q.window : "Herald's window"}, ${mode}, in each device's time zone (else ${q.timezone || "UTC"})`;
  const cap = c.frequency_cap === null || c.frequency_cap === undefined ? "Herald's"
    : c.frequency_cap === "none" ? "none (its sends still count)" : `${c.frequency_cap}, with Herald's`;
  const shown = [h("span", { id: "quiet-hours-shown", text: `Quiet hours: ${quiet}.` }), " ",
    h("span", { id: "frequency-cap-shown", text: `Frequency cap: ${cap}.` })];
  const until = c.quiet_hours_until;
  if (until) {  // still to come while it may send; what was planned once it stopped
    const waiting = !FINAL.has(c.status) && new Date(until) > new Date();
    // Counts have no figure for the held: they are targeted when their wave is paged.
    const zones = (c.waves || []).filter((w) => w.held).flatMap((w) => w.zones).join(", ");
    const where = zones ? `: devices in ${zones}` : "";
    shown.push(" ", h("strong", { id: "quiet-until", "data-until": until, text: waiting
      ? `Held by quiet hours until ${bothTimes(until)}${where}, targeted then.`
      : `Quiet hours held part of it until ${bothTimes(until)}${where}.` }));
  }
  return shown;
}

const stillToGo = (c) => `${fmt(c.counts.unsent)} of ${fmt(c.counts.targeted)} are still to go.`;

function renderStop(parts, view) {
  const c = view.campaign;
  const stoppable = !FINAL.has(c.status) && c.status !== "cancelling" && !view.stopRequested;
  if (parts.stopButton) parts.stopButton.hidden = !stoppable;
  if (c.status === "cancelling") {
    parts.stopped.replaceChildren(h("p", { class: "stopped", id: "stopping",
      text: "Stopping: waiting for every sender to confirm…" }));
  } else if (c.status === "failed" && c.error) {
    // Why it failed, in full: FCM's own words when FCM refused the campaign (a configuration
    // error stops it), or which recipients a retry can still reach.
    const refused = c.cancel && c.cancel.requested_by && c.cancel.requested_by.kind === "system";
    parts.stopped.replaceChildren(h("p", { class: "stopped failed", id: "failure-reason",
      "data-sent": c.counts.sent, "data-unsent": c.counts.unsent, "data-failed": c.counts.failed },
    h("strong", { text: refused ? "Stopped by Herald: " : "Failed: " }), c.error,
    ` (${fmt(c.counts.sent)} sent, ${fmt(c.counts.failed)} failed, ${fmt(c.counts.unsent)} not sent)`));
  } else if (c.status === "paused") {
    const p = c.pause || {};
    parts.stopped.replaceChildren(h("p", { class: "stopped paused", id: "paused-summary",
      "data-sent": c.counts.sent, "data-unsent": c.counts.unsent },
    h("strong", { text: p.kind === "gate" ? "Halted by the rollout's gate: " : "Paused: " }),
    p.settled_at ? `${fmt(c.counts.sent)} sent, ${fmt(c.counts.unsent)} not sent yet`
      : "waiting for every sender to stop…",
    p.reason ? ` — “${p.reason}”` : ""));
  } else if (c.status === "cancelled") {
    parts.stopped.replaceChildren(h("p", { class: "stopped", id: "stopped-summary",
      "data-sent": c.counts.sent, "data-unsent": c.counts.unsent, "data-failed": c.counts.failed },
    `Stopped: ${fmt(c.counts.sent)} sent, ${fmt(c.counts.unsent)} not sent`,
    c.counts.failed ? ` (${fmt(c.counts.failed)} failed)` : ""));
  } else {
    parts.stopped.replaceChildren();
  }
}

function confirmStop(parts, view) {
  const c = view.campaign;
  const keep = h("button", { type: "button", autofocus: true, id: "keep-sending", text: "Keep sending" });
  const stop = h("button", { type: "button", class: "stop", id: "confirm-stop", text: "Stop sending now" });
  view.toGo = h("p", { class: "big", id: "still-to-go", text: stillToGo(c) });
  const dialog = h("dialog", { id: "stop-dialog", "aria-labelledby": "stop-title" },
    h("h2", { id: "stop-title", text: `Stop “${label(c)}”?` }),
    view.toGo,
    h("p", { text: "Every sender stops before its next request to FCM. Nothing not yet sent will be sent. This cannot be undone; you can send the rest later." }),
    h("div", { class: "actions" }, keep, stop));
  const close = () => { view.toGo = null; view.closeDialog = null; dialog.close(); dialog.remove(); };
  view.closeDialog = close;
  keep.addEventListener("click", close);
  dialog.addEventListener("cancel", () => { view.toGo = null; view.closeDialog = null; dialog.remove(); });
  stop.addEventListener("click", async () => {
    stop.disabled = true;
    try {
      await post(`/v1/campaigns/${c.id}/cancel`, { reason: "stopped from the console" });
      view.stopRequested = true;
      renderStop(parts, view);
    } catch (error) {
      reportFailure(error);
    }
    close();
  });
  document.body.append(dialog);
  dialog.showModal();
  keep.focus();
}

// --- approval of a large send ---------------------------------------------------------------
// A person is a key's owner (or, for a key older than owners, the key itself): the keys of one
// person are one person, and whoever created the campaign or changed it since its last approval
// may not approve it.
const personOf = (actor) => actor && (actor.owner || actor.id);

function ownPart(c) {
  const me = session.me && session.me.owner;
  if (!me) return null;
  if (personOf(c.created_by) === me) return "You created this campaign (or its schedule)";
  if ((c.editors || []).some((a) => personOf(a) === me)) return "You changed it since its last approval";
  return null;
}

function renderApproval(parts, view) {
  const c = view.campaign;
  if (c.status !== "awaiting_approval") { parts.approval.replaceChildren(); return; }
  const own = ownPart(c);
  const reach = c.audience_estimate === null || c.audience_estimate === undefined
    ? "" : ` It reaches ${fmt(c.audience_estimate)} devices.`;
  const children = [h("strong", { text: "Awaiting approval." }),
    ` Nothing is sent until someone other than whoever created or changed it approves it.${reach}`,
    approvalSummary(c)];
  if (parts.approveButton) {
    const why = own ? `${own}: another operator or an admin must approve it.` : "";
    parts.approveButton.disabled = Boolean(own) || view.approving === true;
    parts.approveButton.title = why;
    children.push(" ", parts.approveButton);
    if (own) children.push(h("p", { class: "hint", id: "approve-hint", text: why }));
  } else {
    children.push(h("p", { class: "hint", text: "An operator or an admin may approve it." }));
  }
  parts.approval.replaceChildren(h("div", { class: "notice awaiting" }, ...children));
}

// Everything the approval covers, as the approver approves it (its digest is what is sent).
function approvalSummary(c) {
  const rows = [["Title", c.title], ["Body", c.body]];
  for (const [key, value] of Object.entries(c.data || {})) rows.push([`Data ${key}`, value]);
  if (c.image_url) rows.push(["Image", c.image_url]);
  for (const [tag, t] of Object.entries(c.translations || {})) rows.push([`In ${tag}`, `${t.title} — ${t.body}`]);
  if (c.options) rows.push(["Options", JSON.stringify(c.options)]);
  rows.push(["Reaches", c.retarget ? `the ${c.retarget.outcome} recipients of ${c.retarget.campaign_id}`
    : JSON.stringify(c.audience || {}, (key, value) => (value === null ? undefined : value))]);
  rows.push(["Purpose", PURPOSES[c.purpose || "legacy"]]);
  rows.push(["Rate", c.rate_per_s ? `${fmt(c.rate_per_s)}/s` : "uncapped"]);
  if (c.rollout) rows.push(["Rollout", c.rollout.waves.map((w) => `${w.percent}% (hold ${w.hold_s} s)`).join(", ")]);
  rows.push(["Sends at", localTime(c.due_at)]);
  rows.push(["Digest", c.content_digest]);
  return h("dl", { class: "facts", id: "approval-content" },
    rows.flatMap(([term, value]) => [h("dt", { text: term }), h("dd", { text: value })]));
}

async function approveCampaign(parts, view) {
  const c = view.campaign;
  view.approving = true;
  parts.approveButton.disabled = true;
  try {
    // The digest of what this page shows: refused if the campaign changed since.
    await post(`/v1/campaigns/${c.id}/approve`, { digest: c.content_digest });
    notify(`“${label(c)}” approved.`, true);
  } catch (error) {
    reportFailure(error);
  }
  view.approving = false;
}

// --- test send: the campaign's exact message to a few named devices --------------------------
function testSendForm(id) {
  const kind = h("select", { id: "test-kind" }, h("option", { value: "tokens", text: "Device tokens" }),
    h("option", { value: "user_ids", text: "User ids" }));
  const targets = h("textarea", { id: "test-targets", rows: 2, placeholder: "one per line or comma-separated (a campaign's tests reach 25 devices at most by default)" });
  const result = h("div", { id: "test-result" });
  const submit = h("button", { type: "submit", id: "test-send", text: "Send a test" });
  return h("section", { class: "panel", id: "test-panel" }, h("h2", { text: "Test send" }),
    h("p", { class: "hint", text: "Sends this campaign's exact message to these devices only. Recorded apart: never in its numbers or audit." }),
    h("form", { class: "row", onsubmit: async (event) => {
      event.preventDefault();
      const named = listOf(targets);
      if (!named.length) return;
      submit.disabled = true;
      try {
        result.replaceChildren(testResult(await post(`/v1/campaigns/${id}/test`, { [kind.value]: named })));
      } catch (error) {
        reportFailure(error);
      }
      submit.disabled = false;
    } }, kind, targets, submit), result);
}

function testResult(answer) {
  const rows = answer.outcomes.map((o) => h("tr", { "data-suffix": o.token_suffix,
    class: o.accepted ? "accepted" : "refused" },
  h("td", { class: "num", text: `…${o.token_suffix}` }), h("td", { text: o.user_id || "—" }),
  h("td", { text: o.accepted ? "accepted" : o.error })));
  return h("div", {}, h("p", { id: "test-summary", text: `${answer.accepted} accepted, ${answer.failed} refused` }),
    h("table", { class: "test-outcomes" }, h("thead", {}, h("tr", {}, h("th", { text: "Token" }),
      h("th", { text: "User" }), h("th", { text: "FCM" }))), h("tbody", {}, ...rows)));
}

// Pause (responder and up) and resume (operator and up): a pause keeps the rest, so one click.
function addHoldButtons(parts, view) {
  parts.pauseButton = can("campaigns:cancel") ? h("button", { type: "button", id: "pause",
    hidden: true, onclick: () => hold(parts, view, "pause") }, "❚❚ Pause") : null;
  parts.resumeButton = can("campaigns:send") ? h("button", { type: "button", class: "primary",
    id: "resume", hidden: true, onclick: () => hold(parts, view, "resume") }, "▶ Resume") : null;
  parts.stop.prepend(...[parts.pauseButton, parts.resumeButton].filter(Boolean));
}

async function hold(parts, view, action) {
  const button = action === "pause" ? parts.pauseButton : parts.resumeButton;
  button.disabled = true;
  try {
    const answer = await post(`/v1/campaigns/${view.campaign.id}/${action}`,
      action === "pause" ? { reason: "paused from the console" } : undefined);
    notify(action === "pause" ? "Paused: every sender stops before its next request."
      : `Resumed: ${answer.status.replace("_", " ")}.`, true);
  } catch (error) {
    reportFailure(error);
  }
  button.disabled = false;
}

function renderHold(parts, c) {
  const holding = Boolean(c.rollout && c.rollout.holding);
  if (parts.pauseButton) parts.pauseButton.hidden = c.status !== "in_progress";
  if (parts.resumeButton) {
    parts.resumeButton.hidden = !(c.status === "paused" || (c.status === "in_progress" && holding));
    parts.resumeButton.textContent = c.status === "paused" ? "▶ Resume" : "▶ Next wave now";
  }
}

// A staged rollout: its waves, the one being sent or held, the hold's countdown, the gate.
function renderRollout(parts, c) {
  const r = c.rollout;
  parts.rollout.hidden = !r;
  if (!r) return;
  const waves = r.waves.map((w, i) => {
    const state = i + 1 < r.wave ? "done" : i + 1 === r.wave ? (r.holding ? "holding" : "sending") : "waiting";
    return h("li", { class: `wave ${state}`, "data-wave": i + 1 },
      h("strong", { text: `Wave ${i + 1}` }), ` ${w.percent}%`,
      w.hold_s ? h("span", { class: "muted", text: ` then hold ${w.hold_s} s` }) : "",
      h("span", { class: "wave-state", text: state }));
  });
  const g = r.gate;
  const gate = g.failure_rate_above === null ? "no gate" :
    `failure rate ${(100 * g.failure_rate).toFixed(1)}% (${fmt(g.failed)} of ${fmt(g.attempted)}), ` +
    `halts above ${(100 * g.failure_rate_above).toFixed(1)}% once ${fmt(g.min_attempts)} were attempted`;
  parts.countdown = h("span", { id: "hold-countdown", "data-until": r.hold_until || "" });
  parts.rollout.replaceChildren(h("h2", { text: "Staged rollout" }),
    h("ol", { class: "waves", id: "waves" }, ...waves),
    h("p", {}, h("strong", { text: "Hold: " }), parts.countdown),
    h("p", { id: "gate" }, h("strong", { text: "Gate: " }), gate));
  parts.lastCampaign = c;
  tickCountdown(parts, c);
  if (!parts.countdownTimer) {  // one ticker for the page's life
    parts.countdownTimer = true;
    every(250, async () => tickCountdown(parts, parts.lastCampaign));
  }
}

function tickCountdown(parts, c) {
  if (!c || !c.rollout || !parts.countdown) return;
  const r = c.rollout;
  if (!r.holding || !r.hold_until) {
    parts.countdown.textContent = r.wave >= r.waves.length ? "last wave" : "none (sending this wave)";
    return;
  }
  const left = Math.max(0, Math.ceil((new Date(r.hold_until) - Date.now()) / 1000));
  parts.countdown.textContent = c.status === "paused" ? `paused (${left} s were left)`
    : `next wave in ${left} s`;
}

// Who did it. An actor the server could not verify (an AMQP cancel without a user_id names its
// sender itself, and may name anyone) is marked as such, apart from the name it gave.
function actorOf(actor) {
  if (!actor) return [];
  const name = `by ${actor.name}`;
  return actor.verified ? [name] : [name, " ", h("span", { class: "unverified",
    title: "Named by the message itself; RabbitMQ did not check it (no user_id)",
    text: "unverified: self-declared sender" })];
}

function timeline(c) {
  const steps = [["Created", c.created_at, actorOf(c.created_by)]];
  for (const approval of c.approvals || []) {
    steps.push(["Approved", approval.at, actorOf(approval.by)]);
    if (approval.revoked_at) steps.push(["Approval revoked", approval.revoked_at,
      [...actorOf(approval.revoked_by), " changed what was approved"]]);
  }
  if (c.fired_at) steps.push(["Fired (due)", c.fired_at, ["scheduler"]]);
  if (c.started_at) steps.push(["Claimed", c.started_at, ["a dispatcher started paging the audience"]]);
  if (c.cancel) {
    const extra = [c.cancel.on_behalf_of ? `on behalf of ${c.cancel.on_behalf_of}` : "",
      c.cancel.reason ? `— “${c.cancel.reason}”` : ""].filter(Boolean).join(" ");
    steps.push(["Cancel requested", c.cancel.requested_at,
      [...actorOf(c.cancel.requested_by), extra ? ` ${extra}` : ""]]);
    if (c.cancel.acknowledged_at) steps.push(["Acknowledged", c.cancel.acknowledged_at, ["every pod stopped"]]);
  }
  if (c.pause) {
    const p = c.pause;
    steps.push([p.kind === "gate" ? "Halted by the gate" : "Pause requested", p.requested_at,
      [...actorOf(p.requested_by), p.reason ? ` — “${p.reason}”` : ""]]);
    if (p.settled_at) steps.push(["Paused", p.settled_at, ["every pod stopped; nothing in flight"]]);
    if (p.resumed_at) steps.push(["Resumed", p.resumed_at, actorOf(p.resumed_by)]);
  }
  if (c.finished_at) steps.push(["Finished", c.finished_at, [c.status + (c.error ? `: ${c.error}` : "")]]);
  const rows = steps.map(([what, at, detail]) => h("li", { "data-step": what },
    h("strong", { text: what }), h("span", { class: "num", text: localTime(at) }), h("span", {}, ...detail)));
  return rows.concat(links(c));
}

function links(c) {
  const link = (text, id) => h("li", {}, h("strong", { text }), h("span"),
    h("a", { href: `#/campaigns/${id}`, text: id }));
  const found = [];
  if (c.retarget) found.push(link(`Follow-up (${c.retarget.outcome}) of`, c.retarget.campaign_id));
  if (c.amends) found.push(link("Amends", c.amends));
  for (const id of c.amended_by || []) found.push(link("Amended by", id));
  return found;
}

function downloads(id) {
  const grid = h("div", { class: "downloads" });
  for (const outcome of ["sent", "failed", "unsent", "suppressed"]) {
    grid.append(h("strong", { text: outcome }));
    for (const format of ["csv", "ndjson"]) {
      grid.append(h("button", { type: "button", "data-outcome": outcome, "data-format": format,
        onclick: () => download(id, outcome, format).catch(reportFailure) },
      `${outcome}.${format}`));
    }
  }
  return h("div", {}, h("p", { class: "hint", text: "Exactly who got it, who did not, and why: one line per recipient." }), grid);
}

async function download(id, outcome, format) {
  const response = await call("GET", `/v1/campaigns/${id}/recipients?outcome=${outcome}&format=${format}`);
  const blob = await response.blob();
  const named = /filename="([^"]+)"/.exec(response.headers.get("Content-Disposition") || "");
  const url = URL.createObjectURL(blob);
  const anchor = h("a", { href: url, download: named ? named[1] : `${id}-${outcome}.${format}` });
  document.body.append(anchor);
  anchor.click();
  anchor.remove();
  setTimeout(() => URL.revokeObjectURL(url), 10_000);
}

// --- follow-ups: send the rest, correct everyone ----------------------------------------------
function renderFollowUps(box, c) {
  box.replaceChildren();
  if (!can("campaigns:send") || !FINAL.has(c.status) || c.status === "missed") return;
  const n = c.counts;
  const actions = h("div", { class: "row" });
  const slot = h("div");
  const held = n.suppressed || 0;
  if (n.unsent > 0 || held > 0) {
    actions.append(h("button", { type: "button", id: "send-rest", class: "primary", onclick: () =>
      slot.replaceChildren(followUpForm(c, "retarget")) }, `Send the rest (${fmt(n.unsent + held)})`));
  }
  if (n.sent > 0 || n.unsent > 0 || held > 0) {
    actions.append(h("button", { type: "button", id: "correct-everyone", onclick: () =>
      slot.replaceChildren(followUpForm(c, "correct")) }, "Correct everyone"));
  }
  if (actions.childElementCount) box.append(h("section", { class: "panel" }, h("h2", { text: "Follow up" }), actions, slot));
}

function followUpForm(c, kind) {
  const editor = contentEditor({ title: c.title, body: c.body, image_url: c.image_url, data: c.data },
    c.replace_key || LONGEST_DEFAULT_KEY);
  const n = c.counts;
  const held = n.suppressed || 0;
  // The recipients a rule held back (the frequency cap) are left out unless asked for; when
  // nobody else is left to send to, they are what "the rest" means.
  const withHeld = h("input", { type: "checkbox", id: "include-suppressed", checked: n.unsent === 0 && held > 0 });
  const reach = h("p", { class: "reach", id: "reach" });
  const describe = () => {
    const fresh = n.unsent + (withHeld.checked ? held : 0);
    reach.textContent = kind === "retarget"
      ? `This will reach ${fmt(fresh)} devices: everyone this campaign did not send to${withHeld.checked ? ", the held back included" : ""}.`
      : `${fmt(fresh)} devices get it as a new notification; ${fmt(n.sent)} that got the original get it as its replacement.`;
  };
  withHeld.addEventListener("change", describe);
  describe();
  const heldChoice = held > 0
    ? h("label", { class: "row", for: "include-suppressed" }, withHeld,
      ` Also the ${fmt(held)} the frequency cap held back (they may be held back again)`)
    : null;
  const result = h("div", { id: "follow-up-result" });
  const idempotencyKey = crypto.randomUUID();
  const submit = h("button", { type: "submit", class: "primary", id: "follow-up-send",
    text: kind === "retarget" ? "Send to the rest" : "Send the correction to everyone" });
  const form = h("form", { class: "editor panel", id: `${kind}-form`, onsubmit: async (event) => {
    event.preventDefault();
    if (!editor.valid()) return;
    submit.disabled = true;
    try {
      const body = withHeld.checked ? { ...editor.value(), include_suppressed: true } : editor.value();
      const answer = await post(`/v1/campaigns/${c.id}/${kind}`, body,
        { "Idempotency-Key": idempotencyKey });
      if (kind === "retarget") { location.hash = `#/campaigns/${answer.id}`; return; }
      result.replaceChildren(correctionResult(answer));
      document.querySelectorAll("#send-rest, #correct-everyone").forEach((b) => { b.disabled = true; });
    } catch (error) {
      reportFailure(error);
      submit.disabled = false;
    }
  } }, h("h2", { text: kind === "retarget" ? "Send the rest" : "Correct everyone" }),
  editor.element, ...(heldChoice ? [heldChoice] : []), reach, h("p", {}, submit), result);
  return form;
}

function correctionResult(answer) {
  const languages = (made) => Object.entries(made.languages || {})
    .map(([variant, count]) => `${variant} ${fmt(count)}`).join(", ");
  const half = (name, made, what) => made
    ? h("li", { "data-half": name }, `${what}: `, h("strong", { class: "num", text: fmt(made.expected) }),
      " devices — ", h("a", { href: `#/campaigns/${made.id}`, text: made.id }),
      h("span", { class: "muted languages", text: ` (by language: ${languages(made)})` }))
    : h("li", { "data-half": name, text: `${what}: nobody` });
  return h("div", { class: "notice ok" }, h("strong", { text: "Correction sent." }),
    h("ul", {}, half("retarget", answer.retarget, "New notification to the unsent"),
      half("amend", answer.amend, "Replacement for those who got the original")));
}

// --- content editor: title, body, image, data pairs, checked like the API checks them ----------
function contentEditor(initial, replaceKey) {
  const title = h("input", { type: "text", id: "title", required: true, maxlength: 1000, value: initial.title || "" });
  const body = h("textarea", { id: "body", required: true, maxlength: 4000 });
  body.value = initial.body || "";
  const image = h("input", { type: "url", id: "image-url", value: initial.image_url || "", placeholder: "https://… (optional)" });
  const pairs = h("div", { class: "pairs", id: "data-pairs" });
  const size = h("p", { class: "size", id: "payload-size" });
  const problems = h("div", { class: "field-error", id: "data-errors" });
  const addPair = (key = "", value = "") => {
    const row = h("div", { class: "pair" },
      h("input", { type: "text", class: "data-key", placeholder: "camelCaseKey", value: key, oninput: check }),
      h("input", { type: "text", class: "data-value", placeholder: "value", value, oninput: check }),
      h("button", { type: "button", class: "quiet", "aria-label": "Remove", onclick: () => { row.remove(); check(); } }, "Remove"));
    pairs.append(row);
  };
  const data = () => {
    const found = {};
    for (const row of pairs.children) {
      const key = $(".data-key", row).value.trim();
      if (key) found[key] = $(".data-value", row).value;
    }
    return found;
  };
  const value = () => {
    const content = { title: title.value, body: body.value, data: data() };
    if (image.value.trim()) content.image_url = image.value.trim();
    return content;
  };
  function check() {
    const content = value();
    const errors = [...pairs.children].map((row) => dataKeyProblem($(".data-key", row).value.trim()))
      .filter(Boolean);
    const bytes = payloadBytes(content, replaceKey);
    size.textContent = `${fmt(bytes)} of ${fmt(MAX_PAYLOAD_BYTES)} bytes`;
    size.className = bytes > MAX_PAYLOAD_BYTES ? "size over" : "size";
    if (bytes > MAX_PAYLOAD_BYTES) errors.push(`The message is ${fmt(bytes)} bytes; FCM accepts at most ${fmt(MAX_PAYLOAD_BYTES)}.`);
    problems.replaceChildren(...errors.map((e) => h("div", { text: e })));
    return errors.length === 0;
  }
  for (const [key, val] of Object.entries(initial.data || {})) addPair(key, val);
  if (!pairs.children.length) addPair();
  for (const input of [title, body, image]) input.addEventListener("input", check);
  const element = h("div", { class: "editor-fields" },
    h("label", { for: "title", text: "Title" }), title,
    h("label", { for: "body", text: "Body" }), body,
    h("label", { for: "image-url", text: "Image URL" }), image,
    h("label", { text: "Data" }, h("span", { class: "hint", text: " — camelCase keys, string values, for the app (e.g. landingUrl)" })),
    pairs, h("p", {}, h("button", { type: "button", class: "quiet", id: "add-pair", onclick: () => addPair() }, "Add a data pair")),
    problems, size);
  check();
  return { element, value, valid: check };
}

function dataKeyProblem(key) {
  if (!key) return null;
  if (!DATA_KEY.test(key)) {
    const hint = camelCase(key);
    return `Data key “${key}” must be camelCase like “landingUrl”${DATA_KEY.test(hint) ? ` (did you mean “${hint}”?)` : ""}.`;
  }
  if (RESERVED_KEYS.has(key) || RESERVED_PREFIXES.some((p) => key.startsWith(p))) {
    return `Data key “${key}” is reserved by FCM.`;
  }
  return null;
}

function camelCase(key) {
  const [head, ...rest] = key.replace(/^[_\- ]+|[_\- ]+$/g, "").split(/[_\-\s]+/);
  return head.slice(0, 1).toLowerCase() + head.slice(1) + rest.map((p) => p.slice(0, 1).toUpperCase() + p.slice(1)).join("");
}

function payloadBytes(content, replaceKey) {
  const notification = { title: content.title, body: content.body };
  if (content.image_url) notification.image = content.image_url;
  const payload = { notification };
  if (Object.keys(content.data).length) payload.data = content.data;
  const topic = WEB_PUSH_TOPIC.test(replaceKey) ? replaceKey : "x".repeat(32);
  Object.assign(payload, {
    android: { collapse_key: replaceKey, notification: { tag: replaceKey } },
    apns: { headers: { "apns-collapse-id": replaceKey } },
    webpush: { headers: { Topic: topic }, notification: { tag: replaceKey } },
  });
  return new TextEncoder().encode(JSON.stringify(payload)).length;
}

// --- translations and the preview of one device's message ----------------------------------------
function translationsEditor(onChange) {
  const list = h("div", { class: "translations", id: "translations" });
  const add = (tag = "", title = "", body = "") => {
    const text = h("textarea", { class: "tr-body", placeholder: "body", rows: 2, oninput: onChange });
    text.value = body;
    list.append(h("div", { class: "translation" },
      h("input", { type: "text", class: "tr-tag", placeholder: "es, pt-BR…", value: tag, oninput: onChange }),
      h("input", { type: "text", class: "tr-title", placeholder: "title", value: title, oninput: onChange }),
      text,
      h("button", { type: "button", class: "quiet", "aria-label": "Remove translation",
        onclick: (event) => { event.target.closest(".translation").remove(); onChange(); } }, "Remove")));
  };
  const value = () => {
    const found = {};
    for (const row of list.children) {
      const tag = $(".tr-tag", row).value.trim();
      if (tag) found[tag] = { title: $(".tr-title", row).value, body: $(".tr-body", row).value };
    }
    return found;
  };
  const element = h("div", { class: "editor-fields" },
    h("label", { text: "Translations" }, h("span", { class: "hint",
      text: " — a device gets the most specific language its locale matches (es-MX, then es), else the words above" })),
    list, h("p", {}, h("button", { type: "button", class: "quiet", id: "add-translation",
      onclick: () => { add(); onChange(); } }, "Add a translation")),
    h("p", { class: "hint", text: 'Placeholders in titles, bodies and data values: {{ attributes.first_name | default("there") }}, {{ user_id }}, {{ locale }}, {{ platform }} (docs/content.md).' }));
  return { element, value, add };
}

function previewPanel(content) {
  const device = h("input", { type: "text", id: "preview-device", placeholder: "a device token, or user:<user id>" });
  const out = h("div", { id: "preview-result", class: "preview-result" },
    h("p", { class: "muted", text: "The exact message one device would get: its language, its name, every option. Nothing is sent." }));
  const show = async () => {
    const who = device.value.trim();
    if (!who) return;
    const body = { content: content() };
    if (who.startsWith("user:")) body.user_id = who.slice(5); else body.token = who;
    try {
      out.replaceChildren(renderPreview(await post("/v1/campaigns/preview", body)));
    } catch (error) {
      if (error.name !== "AbortError") out.replaceChildren(h("p", { class: "field-error", text: `${error.message} (${error.code})` }));
    }
  };
  const element = h("aside", { class: "panel preview", id: "preview" }, h("h2", { text: "Preview for one device" }),
    h("label", { for: "preview-device", text: "Device" }), device,
    h("p", {}, h("button", { type: "button", id: "show-preview", onclick: show }, "Show the message")), out);
  return { element, refresh: () => { if (device.value.trim()) show(); } };
}

function renderPreview(preview) {
  const d = preview.device;
  const facts = h("dl", { class: "facts" },
    h("dt", { text: "Device" }), h("dd", { text: `${d.platform}, ${d.locale || "no locale"}${d.user_id ? ", " + d.user_id : ""}` }),
    h("dt", { text: "Language" }), h("dd", { id: "preview-variant", text: preview.variant }));
  if (!preview.message) {
    return h("div", {}, facts, h("p", { class: "field-error", id: "preview-failure",
      text: `This device would fail: ${preview.failure} (${preview.failure_code})` }));
  }
  const n = preview.message.notification;
  return h("div", {}, facts,
    h("div", { class: "phone" }, h("div", { class: "phone-title", id: "preview-title", text: n.title }),
      h("div", { class: "phone-body", id: "preview-body", text: n.body })),
    h("p", { class: "muted", text: `${fmt(preview.size_bytes)} of ${fmt(MAX_PAYLOAD_BYTES)} bytes` }),
    h("pre", { class: "mono fcm-message", id: "preview-message", text: JSON.stringify({ message: preview.message }, null, 2) }));
}

function splitText(found) {
  const total = `This will reach ${fmt(found.devices)} devices`;
  if (!found.by_language) return total + ".";
  const parts = Object.entries(found.by_language).sort((a, b) => b[1] - a[1])
    .map(([variant, count]) => `${variant} ${fmt(count)}`);
  return `${total}: ${parts.join(", ")}.`;
}

// Each rule's figure under the count (POST /v1/audiences/estimate: held_back, for a marketing
// campaign only), one line each, so that the choices above visibly move them. The opt-out is
// not among the devices counted; the others are: targeted, then suppressed or sent later.
function heldBackLines(found, asked) {
  const rules = found.held_back || {};
  const line = (rule, text) => h("li", { "data-rule": rule, "data-count": rules[rule], text });
  const lines = [];
  if (rules.marketing_opt_out > 0) {
    lines.push(line("marketing_opt_out", `${fmt(rules.marketing_opt_out)} more held back: not opted in to marketing.`));
  }
  if ("frequency_cap" in rules) lines.push(line("frequency_cap", capLine(rules.frequency_cap, asked)));
  if ("quiet_hours_held" in rules) lines.push(...quietLines(rules, found, asked, line));
  if (lines.length && asked.later) {
    lines.push(h("li", { class: "hint", text: "Judged as if it were sent now: quiet hours and the cap are applied when it is sent." }));
  }
  return lines;
}

function capLine(count, asked) {
  if (count > 0) return `${fmt(count)} of them suppressed by the frequency cap (as of now: other campaigns move it).`;
  return asked.frequency_cap === "none" ? "Frequency cap: none for this campaign (its sends still count for later ones)."
    : "Frequency cap: it holds back none of them now.";
}

function quietLines(rules, found, asked, line) {
  const mode = quietMode(asked.quiet_hours);
  if (mode === "off") return [line("quiet_hours_held", "Quiet hours: off for this campaign.")];
  const lines = [];
  if (mode === "hold" || rules.quiet_hours_held > 0) {
    lines.push(line("quiet_hours_held", rules.quiet_hours_held > 0
      ? `${fmt(rules.quiet_hours_held)} of them held by quiet hours in their time zone until ${bothTimes(found.quiet_hours_until)}, sent then.`
      : "Quiet hours: none of them is inside quiet hours now; none held."));
  }
  if (mode === "skip" || rules.quiet_hours_skipped > 0) {
    lines.push(line("quiet_hours_skipped", rules.quiet_hours_skipped > 0
      ? `${fmt(rules.quiet_hours_skipped)} of them suppressed: inside quiet hours in their time zone, skipped.`
      : "Quiet hours: none of them is inside quiet hours now; none skipped."));
  }
  return lines;
}

// A campaign's quiet_hours as a create sends it: omitted (the setting's, held), "hold", "skip",
// "off", or {window, mode}.
function quietMode(asked) {
  if (asked === undefined || asked === null) return "hold";
  if (typeof asked === "string") return asked;
  return asked.window === "off" ? "off" : asked.mode || "hold";
}

// --- new campaign ------------------------------------------------------------------------------
function newCampaignPage(main) {
  if (!can("campaigns:send")) { main.append(h("p", { text: "This key may not send campaigns." })); return; }
  const editor = contentEditor({}, LONGEST_DEFAULT_KEY);
  const translations = translationsEditor(() => { estimate(); });
  const name = h("input", { type: "text", id: "name", maxlength: 200, placeholder: "optional, e.g. live-stream-2026-11" });
  const rate = h("input", { type: "number", id: "rate", min: 1, step: 1, placeholder: "no cap: as fast as FCM allows" });
  const lane = laneChooser(() => estimate());
  const rules = personRules(() => estimate());
  const purpose = purposeSelect(() => { rules.showFor(purpose.value()); estimate(); });
  const audience = audienceEditor(() => estimate());
  const when = whenEditor(() => estimate());
  const reach = h("p", { class: "reach", id: "estimate", text: "Counting the audience…" });
  const heldBack = h("ul", { class: "held-back", id: "held-back" });
  const forecast = h("p", { class: "forecast", id: "forecast", text: "" });
  const content = () => ({ ...editor.value(), translations: translations.value() });
  const preview = previewPanel(content);
  const idempotencyKey = crypto.randomUUID();
  let counter = 0;
  let timer = null;
  const estimate = () => {
    clearTimeout(timer);
    timer = setTimeout(async () => {
      const mine = ++counter;
      try {
        const languages = Object.keys(translations.value());
        // What the create would send that changes who is held back, and so the figures.
        const chosen = { ...rules.value(purpose.value()), ...zoneOf(when.value()) };
        const asked = { audience: audience.value(), languages, lane: lane.value(), purpose: purpose.value(), ...chosen };
        if (rate.value && Number(rate.value) > 0) asked.rate_per_s = Number(rate.value);
        const found = await post("/v1/audiences/estimate", asked);
        if (mine === counter) {
          reach.textContent = splitText(found);
          heldBack.replaceChildren(...heldBackLines(found, { ...chosen, later: Boolean(when.value().send_at) }));
          forecast.textContent = forecastText(found, asked.lane);
        }
      } catch (error) {
        if (mine === counter && error.name !== "AbortError") {
          reach.textContent = `The audience, a language, the quiet hours or the cap is not valid: ${error.message}`;
          heldBack.replaceChildren();
        }
      }
    }, ESTIMATE_DELAY_MS);
  };
  const submit = h("button", { type: "submit", class: "primary", id: "create", text: "Send campaign" });
  const form = h("form", { class: "editor panel", id: "new-campaign", onsubmit: async (event) => {
    event.preventDefault();
    if (!editor.valid()) return;
    const body = { ...content(), audience: audience.value(), ...when.value() };
    if (name.value.trim()) body.name = name.value.trim();
    if (rate.value) body.rate_per_s = Number(rate.value);
    body.lane = lane.value();
    body.purpose = purpose.value();
    Object.assign(body, rules.value(body.purpose));
    submit.disabled = true;
    try {
      const created = await post("/v1/campaigns", body, { "Idempotency-Key": idempotencyKey });
      location.hash = `#/campaigns/${created.id}`;
    } catch (error) {
      reportFailure(error);
      submit.disabled = false;
    }
  } }, h("h1", { text: "New campaign" }),
  h("label", { for: "name", text: "Name" }), name, editor.element, translations.element,
  h("h2", { text: "Audience" }), audience.element, h("h2", { text: "When" }), when.element,
  h("label", { for: "rate", text: "Rate cap (messages per second, this campaign only)" }), rate,
  h("h2", { text: "Lane" }), lane.element,
  h("label", { for: "purpose", text: "Purpose" }), purpose.element,
  rules.element, reach, heldBack, forecast, h("p", {}, submit));
  rate.addEventListener("input", () => estimate());
  main.append(h("div", { class: "compose" }, form, preview.element));
  estimate();
}

// When the last recipient would be sent (POST /v1/audiences/estimate: finishes_in_s), and what
// that rests on: the fleet's rate (measured, or assumed per sender) and the work ahead of it.
function forecastText(found, lane) {
  if (found.finishes_in_s === null || found.finishes_in_s === undefined) {
    return `Sent now in the ${lane} lane, it would not go out: no sender is alive, or nothing is left for this lane.`;
  }
  const basis = `the fleet sends ${fmt(Math.round(found.fleet_rate_per_s))}/s` +
    (found.fleet_rate_measured ? " (measured)" : " (assumed: not measured yet)") +
    (found.recipients_ahead ? `; ${fmt(found.recipients_ahead)} recipients of running campaigns go first or alongside` : "");
  return `Sent now in the ${lane} lane, the last device gets it ${within(found.finishes_in_s)} — ${basis}.`;
}

function within(seconds) {
  if (seconds < 1) return "in under a second";
  if (seconds < 90) return `in about ${Math.round(seconds)} s`;
  if (seconds < 5400) return `in about ${Math.round(seconds / 60)} min`;
  return `in about ${(seconds / 3600).toFixed(1)} h`;
}

// The lanes this key may send in, as the API says (GET /v1/me: urgent only for the roles of
// HERALD_URGENT_ROLES); the API refuses the others anyway (403 lane_not_allowed).
function laneChooser(onChange) {
  const allowed = (session.me && session.me.lanes) || ["standard"];
  const radios = allowed.map((name) => h("input", { type: "radio", name: "lane", value: name,
    id: `lane-${name}`, checked: name === "standard", onchange: onChange }));
  const element = h("div", {}, h("div", { class: "lanes", id: "lane" },
    radios.map((radio) => h("label", { for: radio.id }, radio, laneBadge(radio.value),
      h("span", { class: "hint", text: LANES[radio.value].split(" — ")[1] })))),
  allowed.includes("urgent") ? "" : h("p", { class: "hint", id: "lane-urgent-hint",
    text: "Urgent is kept for the roles allowed to interrupt everything else; yours is not one of them." }));
  const value = () => (radios.find((radio) => radio.checked) || { value: "standard" }).value;
  return { element, value };
}

// The purposes this key may send with, as the API says (GET /v1/me: transactional only for the
// roles of HERALD_TRANSACTIONAL_ROLES); the API refuses the others anyway (403 purpose_not_allowed).
function purposeSelect(onChange) {
  const allowed = (session.me && session.me.purposes) || ["marketing"];
  const select = h("select", { id: "purpose", onchange: onChange },
    allowed.map((name) => h("option", { value: name, text: PURPOSES[name] })));
  select.value = "marketing";
  const value = () => select.value || "marketing";
  return { element: select, value };
}

// The campaign's timezone as the create sends it (only with a time to send at): quiet hours read
// devices without a timezone of their own in it, else in UTC.
const zoneOf = (when) => (when.timezone ? { timezone: when.timezone } : {});

// Quiet hours and the frequency cap (docs/sending-safely.md), for a marketing campaign only (the
// API refuses them on a transactional one). Hold and skip of the setting's window need only the
// right to send; off, a window of its own and a cap of its own what GET /v1/me says the key
// may (HERALD_QUIET_HOURS_ROLES, HERALD_FREQUENCY_CAP_ROLES); the API refuses the others anyway.
function personRules(onChange) {
  const quiet = quietHoursChooser(onChange);
  const cap = frequencyCapChooser(onChange);
  const element = h("fieldset", { class: "rules", id: "person-rules" },
    h("legend", { text: "Respecting the person (marketing)" }),
    h("label", { for: "quiet-hours", text: "Quiet hours, in each device's time zone" }), quiet.element,
    h("label", { for: "frequency-cap", text: "Frequency cap per person" }), cap.element);
  const showFor = (purpose) => { element.hidden = purpose !== "marketing"; };
  const value = (purpose) => (purpose === "marketing" ? { ...quiet.value(), ...cap.value() } : {});
  return { element, value, showFor };
}

const QUIET_CHOICES = {
  hold: "hold — sent when Herald's quiet hours end where they are",
  skip: "skip — never sent inside Herald's quiet hours (suppressed)",
  off: "off — no quiet hours for this campaign",
  window: "a window of its own…",
};

function quietHoursChooser(onChange) {
  const own = Boolean(session.me && session.me.quiet_hours);
  const select = h("select", { id: "quiet-hours" }, (own ? ["hold", "skip", "off", "window"] : ["hold", "skip"])
    .map((name) => h("option", { value: name, text: QUIET_CHOICES[name] })));
  const ownWindow = h("input", { type: "text", id: "quiet-window", maxlength: 40, placeholder: "22:00-07:00" });
  const mode = h("select", { id: "quiet-mode" }, h("option", { value: "hold", text: "hold until it ends" }),
    h("option", { value: "skip", text: "skip (suppressed)" }));
  const ownRow = h("div", { class: "row", id: "quiet-own", hidden: true }, ownWindow, mode,
    h("span", { class: "hint", text: "wall-clock times; a window whose end comes first crosses midnight" }));
  const element = h("div", { oninput: onChange, onchange: () => { ownRow.hidden = select.value !== "window"; onChange(); } },
    select, ownRow, own ? "" : h("p", { class: "hint", id: "quiet-hours-hint",
      text: "Off and a window of its own are kept for the roles allowed to change quiet hours; yours is not one of them." }));
  // Hold is the default: omitted, as a create without a choice (the setting's window, held).
  const value = () => {
    if (select.value === "hold") return {};
    if (select.value === "window") return { quiet_hours: { window: ownWindow.value.trim(), mode: mode.value } };
    return { quiet_hours: select.value };
  };
  return { element, value };
}

function frequencyCapChooser(onChange) {
  if (!(session.me && session.me.frequency_cap)) {
    return { element: h("p", { class: "hint", id: "frequency-cap-hint",
      text: "Herald's cap applies (HERALD_MARKETING_CAP); only the roles allowed to change it may give a campaign its own." }),
    value: () => ({}) };
  }
  const select = h("select", { id: "frequency-cap" },
    h("option", { value: "", text: "Herald's cap (HERALD_MARKETING_CAP, if set)" }),
    h("option", { value: "none", text: "none — not capped (its sends still count for later campaigns)" }),
    h("option", { value: "own", text: "a lower cap of its own…" }));
  const cap = h("input", { type: "text", id: "frequency-cap-own", maxlength: 100, hidden: true,
    placeholder: "1/24h, or several: 1/1h,3/7d" });
  const element = h("div", { class: "row", oninput: onChange,
    onchange: () => { cap.hidden = select.value !== "own"; onChange(); } }, select, cap);
  const value = () => {
    if (select.value === "own") return { frequency_cap: cap.value.trim() };
    return select.value ? { frequency_cap: select.value } : {};
  };
  return { element, value };
}

function listInput(id, placeholder) {
  return h("input", { type: "text", id, placeholder });
}
const listOf = (input) => input.value.split(/[\s,]+/).map((s) => s.trim()).filter(Boolean);

function audienceEditor(onChange) {
  const platforms = ["android", "ios", "web"].map((p) => h("input", { type: "checkbox", value: p, class: "platform" }));
  const marketing = h("select", { id: "marketing" }, h("option", { value: "", text: "any" }),
    h("option", { value: "true", text: "only those who accept marketing" }), h("option", { value: "false", text: "only those who do not" }));
  const topics = listInput("topics", "any of these topics, comma-separated");
  const locales = listInput("locales", "e.g. ko-KR, en-US");
  const users = listInput("user-ids", "user ids, comma-separated");
  const attrs = h("div", { class: "attrs", id: "attributes" });
  const addAttr = () => {
    const row = h("div", { class: "attr" },
      h("input", { type: "text", class: "attr-name", placeholder: "attribute, e.g. birth_year" }),
      h("select", { class: "attr-op" }, ["eq", "in", "gte", "gt", "lte", "lt"].map((op) => h("option", { value: op, text: op }))),
      h("input", { type: "text", class: "attr-value", placeholder: "value (numbers and true/false as such; \"quoted\" for text)" }),
      h("button", { type: "button", class: "quiet", onclick: () => { row.remove(); onChange(); } }, "Remove"));
    attrs.append(row);
  };
  const value = () => {
    const audience = {};
    const chosen = platforms.filter((p) => p.checked).map((p) => p.value);
    if (chosen.length) audience.platforms = chosen;
    if (marketing.value) audience.marketing_enabled = marketing.value === "true";
    for (const [field, input] of [["topics", topics], ["locales", locales], ["user_ids", users]]) {
      if (listOf(input).length) audience[field] = listOf(input);
    }
    const attributes = {};
    for (const row of attrs.children) {
      const attrName = $(".attr-name", row).value.trim();
      if (!attrName) continue;
      const op = $(".attr-op", row).value;
      const raw = $(".attr-value", row).value;
      attributes[attrName] = { [op]: op === "in" ? raw.split(",").map(scalar) : scalar(raw) };
    }
    if (Object.keys(attributes).length) audience.attributes = attributes;
    return audience;
  };
  const element = h("div", { class: "grid2", oninput: onChange, onchange: onChange },
    h("div", {}, h("label", { text: "Platforms" }, h("span", { class: "hint", text: " — none ticked: every platform" })),
      h("div", { class: "checks" }, platforms.map((p) => h("label", {}, p, p.value)))),
    h("div", {}, h("label", { for: "marketing", text: "Marketing consent" }), marketing),
    h("div", {}, h("label", { for: "topics", text: "Topics" }), topics),
    h("div", {}, h("label", { for: "locales", text: "Locales" }), locales),
    h("div", {}, h("label", { for: "user-ids", text: "Users" }), users),
    h("div", {}, h("label", { text: "Attributes" }), attrs,
      h("button", { type: "button", class: "quiet", id: "add-attribute", onclick: addAttr }, "Add a condition")),
    h("p", { class: "hint", text: "Only devices with push enabled and a live token are ever targeted." }));
  return { element, value };
}

function scalar(raw) {
  const text = raw.trim();
  if (/^".*"$/.test(text)) return text.slice(1, -1);
  if (text === "true" || text === "false") return text === "true";
  if (text !== "" && !Number.isNaN(Number(text))) return Number(text);
  return text;
}

function whenEditor(onChange) {
  const now = h("input", { type: "radio", name: "when", id: "when-now", checked: true });
  const later = h("input", { type: "radio", name: "when", id: "when-later" });
  const at = h("input", { type: "datetime-local", id: "send-at" });
  const here = Intl.DateTimeFormat().resolvedOptions().timeZone || "UTC";
  const known = typeof Intl.supportedValuesOf === "function" ? Intl.supportedValuesOf("timeZone") : [];
  const zones = known.includes(here) ? known : [here, ...known];
  const zone = h("select", { id: "timezone" }, zones.map((z) => h("option", { value: z, text: z, selected: z === here })));
  const value = () => (later.checked && at.value
    ? { send_at: at.value.length === 16 ? `${at.value}:00` : at.value, timezone: zone.value } : {});
  const element = h("div", { class: "row", onchange: onChange },
    h("label", { class: "row" }, now, "Now"), h("label", { class: "row" }, later, "At"), at, zone);
  return { element, value };
}

// --- schedules ---------------------------------------------------------------------------------
function schedulesPage(main) {
  const body = h("tbody");
  main.append(h("h1", { text: "Schedules" }), h("table", { id: "schedules" }, h("thead", {}, h("tr", {},
    ["Schedule", "State", "Lane", "Cron", "Next run (UTC)", "In the schedule's timezone", "In yours", "Missed", ""]
      .map((t) => h("th", { text: t })))), body));
  const refresh = async () => {
    const listed = await get("/v1/schedules?limit=100");
    body.replaceChildren(...listed.items.map((s) => scheduleRow(s, refresh)));
    if (!listed.items.length) body.append(h("tr", {}, h("td", { colspan: 9, class: "muted", text: "No schedules." })));
  };
  every(5000, refresh);
}

function scheduleRow(s, refresh) {
  const toggle = async (state) => {
    try {
      await call("PATCH", `/v1/schedules/${s.id}`, { state });
      await refresh();
    } catch (error) { reportFailure(error); }
  };
  const action = !can("schedules:write") || s.state === "ended" ? ""
    : h("button", { type: "button", onclick: () => toggle(s.state === "active" ? "paused" : "active") },
      s.state === "active" ? "Pause" : "Resume");
  return h("tr", { "data-id": s.id },
    h("td", { text: s.name || s.template.title }), h("td", { text: s.state }),
    h("td", {}, laneBadge(s.template.lane)),
    h("td", { class: "mono", text: `${s.cron} (${s.timezone})` }),
    h("td", { class: "num", text: s.next_run_at ? new Date(s.next_run_at).toISOString().replace(".000Z", "Z") : "—" }),
    h("td", { class: "num", text: s.next_run_local || "—" }),
    h("td", { class: "num", text: localTime(s.next_run_at) }),
    h("td", { class: "num", text: fmt(s.missed_total) }), h("td", {}, action));
}

// --- pods --------------------------------------------------------------------------------------
function podsPage(main) {
  const body = h("tbody");
  const note = h("p", { class: "hint" });
  main.append(h("h1", { text: "Pods" }), note, h("table", { id: "pods" }, h("thead", {}, h("tr", {},
    ["Service", "Pod", "Host / pid", "Version"].map((t) => h("th", { text: t })),
    h("th", { class: "num", text: "Heartbeat age" }), h("th", { text: "Working on" }))), body));
  every(PODS_REFRESH_MS, async () => {
    const listed = await get("/v1/pods");
    note.textContent = `A pod beats every ${listed.heartbeat_interval_s} s and is dead after ${listed.dead_after_missed_beats} missed beats.`;
    const pods = listed.pods.sort((a, b) => a.service.localeCompare(b.service) || a.id.localeCompare(b.id));
    body.replaceChildren(...pods.map((p) => h("tr", { "data-service": p.service },
      h("td", { text: p.service }), h("td", { class: "mono", text: p.id }),
      h("td", { text: `${p.host} / ${p.pid}` }), h("td", { text: p.version }),
      h("td", { class: "num", text: `${p.age_s.toFixed(1)} s` }),
      h("td", {}, p.campaigns.length ? p.campaigns.map((id) => h("a", { href: `#/campaigns/${id}`, class: "mono", text: id + " " })) : "idle"))));
  });
}

// --- routing -----------------------------------------------------------------------------------
const PAGES = [
  [/^#\/campaigns\/([0-9a-f]{24})$/, "campaigns", campaignPage],
  [/^#\/campaigns$/, "campaigns", campaignsPage],
  [/^#\/new$/, "new", newCampaignPage],
  [/^#\/schedules$/, "schedules", schedulesPage],
  [/^#\/pods$/, "pods", podsPage],
];

function route() {
  page.abort();
  page = new AbortController();
  document.querySelectorAll("dialog").forEach((d) => d.remove());
  const main = $("#main");
  main.replaceChildren();
  if (!session.me) { signInPage(main); return; }
  if (location.hash === "#/signin" || !location.hash) { navigate("#/campaigns"); return; }
  notify("");
  const found = PAGES.find(([pattern]) => pattern.test(location.hash));
  if (!found) { main.append(h("p", { text: "No such page." })); return; }
  const [pattern, name, render] = found;
  for (const link of document.querySelectorAll("#nav a")) link.classList.toggle("current", link.dataset.page === name);
  render(main, ...pattern.exec(location.hash).slice(1));
}

async function start() {
  $("#sign-out").addEventListener("click", () => signOut(""));
  window.addEventListener("hashchange", route);
  const stored = sessionStorage.getItem(KEY_STORE);
  if (stored) {
    try { await signIn(stored); } catch { sessionStorage.removeItem(KEY_STORE); }
  }
  route();
}

start();
