// The chat page's websocket: send, stream, tool calls, edit / delete / regenerate.
// Everything shown comes either from server-rendered (autoescaped, sanitized) fragments or is
// set with textContent, so nothing from a message can run as script.
(function () {
  "use strict";
  const root = document.getElementById("chat");
  if (!root) return;
  const thread = () => document.getElementById("thread");
  const form = document.getElementById("composer");
  const input = document.getElementById("composer-input");
  const sendButton = document.getElementById("send-button");
  const stopButton = document.getElementById("stop-button");
  const errorBox = document.getElementById("chat-error");
  const status = document.getElementById("connection");
  let socket = null;
  let retry = 0;
  let streaming = null; // id of the reply being written
  const queued = [];
  let held = null; // events that arrive while the thread is being caught up
  let dropped = false; // the socket has closed since the page was loaded
  let heard = false; // a token or the end of the reply on screen has arrived
  // The composer's message from its send until the server says it is stored: only then is the
  // composer cleared, so a refused message or a dropped connection loses nothing.
  let pending = null; // {clientId, content, frame}

  function connect() {
    const scheme = location.protocol === "https:" ? "wss://" : "ws://";
    socket = new WebSocket(scheme + location.host + root.dataset.wsPath);
    socket.addEventListener("open", () => {
      retry = 0;
      status.textContent = "connected";
      root.dataset.connected = "true";
      if (dropped) catchUp();
      while (queued.length) socket.send(queued.shift());
    });
    socket.addEventListener("close", (ev) => {
      root.dataset.connected = "false";
      dropped = true;
      // 1009: a frame too big for whatever answers (a proxy's limit, or a page older than the
      // server's); daphne itself drops the connection (1006), which the next check covers.
      if (ev.code === 1009) {
        showError("That message is too big for the server, so it was not sent. Its text is still where you typed it.");
      }
      // A message still waiting to be sent goes when the socket opens again; one that was
      // sent but not confirmed may never have arrived, and its text is still in the composer.
      if (pending && !queued.includes(pending.frame)) {
        pending = null;
        if (!streaming) setBusy(false);
        if (ev.code !== 1009) {
          showError("The connection closed before your message was stored. It is still in the box below: send it again once reconnected.");
        }
      }
      if (ev.code === 4401 || ev.code === 4404) { status.textContent = "not available"; return; }
      status.textContent = "reconnecting…";
      setTimeout(connect, Math.min(10000, 500 * 2 ** retry++));
    });
    socket.addEventListener("message", (ev) => {
      const event = JSON.parse(ev.data);
      if (held) held.push(event);
      else handle(event);
    });
  }

  // After a dropped connection, what happened meanwhile (messages stored, replies finished,
  // edits) is read again from the server; events arriving in the meantime are applied after it.
  async function catchUp() {
    if (held || thread().querySelector(".editor")) return; // never throw away an open edit
    held = [];
    try {
      const response = await fetch(location.href, { headers: { "HX-Request": "true" } });
      const fresh = response.ok ? fromHTML(await response.text()) : null;
      if (fresh && fresh.id === "thread" && !thread().querySelector(".editor")) {
        const live = streaming ? rowOf(streaming) : null;
        thread().replaceWith(fresh);
        if (window.htmx) htmx.process(fresh);
        // A reply still being written is not stored yet: keep it on screen, or, when the page
        // drew it from its draft, keep whichever has more of its text.
        const drawn = live ? rowOf(streaming) : null;
        if (live && !drawn) placeAfterParent(live, live.dataset.parent);
        else if (live && drawn.classList.contains("streaming") && longerText(live, drawn)) drawn.replaceWith(live);
        followStreaming();
      }
    } catch (e) {
      // Offline again: the next reconnection tries once more.
    } finally {
      const events = held;
      held = null;
      events.forEach(handle);
    }
  }

  function send(frame) {
    const text = JSON.stringify(frame);
    if (socket && socket.readyState === WebSocket.OPEN) socket.send(text);
    else queued.push(text);
    return text;
  }

  // Characters as the server counts them (Unicode code points): a surrogate pair is one.
  function charCount(text) {
    let pairs = 0;
    for (let i = 0; i < text.length - 1; i++) {
      const c = text.charCodeAt(i);
      if (c >= 0xd800 && c <= 0xdbff) {
        const d = text.charCodeAt(i + 1);
        if (d >= 0xdc00 && d <= 0xdfff) { pairs++; i++; }
      }
    }
    return text.length - pairs;
  }

  // Why the server would refuse `text` for its length (MAX_MESSAGE_CHARS), or "".
  function tooLong(text) {
    const limit = Number(root.dataset.maxMessageChars);
    if (!limit || text.length <= limit) return "";
    const count = charCount(text);
    if (count <= limit) return "";
    return "This message is " + count.toLocaleString("en-US") + " characters long; the limit is "
      + limit.toLocaleString("en-US") + ". Shorten it or send it in parts.";
  }

  // The server has stored the message sent as `clientId`: the composer can let go of it
  // (unless the person has typed on since).
  function stored(clientId) {
    if (!pending || clientId !== pending.clientId) return;
    if (input.value === pending.content) input.value = "";
    pending = null;
  }

  function showError(message) {
    errorBox.textContent = message;
    errorBox.hidden = !message;
  }

  function setBusy(busy) {
    sendButton.disabled = busy;
    stopButton.hidden = !busy;
    root.dataset.busy = busy ? "true" : "false";
    // Screen readers hold a streaming reply back and read it once, whole.
    thread().setAttribute("aria-busy", busy ? "true" : "false");
  }

  function rowOf(id) { return document.getElementById("msg-" + id); }
  function lastId() {
    const rows = thread().querySelectorAll(":scope > li.message");
    return rows.length ? rows[rows.length - 1].dataset.id : null;
  }

  // Insert a row after its parent, dropping whatever followed (a new branch replaces the view).
  function placeAfterParent(el, parentId) {
    const list = thread();
    const parent = parentId ? rowOf(parentId) : null;
    if (parentId && !parent) return false; // another branch than the one on screen
    if (parent) {
      while (parent.nextElementSibling) parent.nextElementSibling.remove();
    } else {
      list.replaceChildren();
    }
    list.appendChild(el);
    return true;
  }

  function fromHTML(html) {
    const t = document.createElement("template");
    t.innerHTML = html.trim();
    return t.content.firstElementChild;
  }

  function replaceRow(id, html) {
    const old = rowOf(id);
    const el = fromHTML(html);
    if (old) old.replaceWith(el);
    if (window.htmx) htmx.process(el);
    return el;
  }

  // Characters as the server counts them (code points), of a reply's text on screen.
  function streamedLength(content) {
    if (content.dataset.length === undefined) content.dataset.length = String(charCount(content.textContent));
    return Number(content.dataset.length);
  }

  // A token event into the reply's text: `text` is all of it so far (a tab that missed the
  // start is sent it); a delta starts at character `at`, and what the tab has of it is skipped.
  function addTokens(content, ev) {
    if (typeof ev.text === "string") {
      content.textContent = ev.text;
      content.dataset.length = String(charCount(ev.text));
      return;
    }
    let delta = ev.delta || "";
    if (typeof ev.at === "number") {
      const known = streamedLength(content);
      if (ev.at < known) delta = Array.from(delta).slice(known - ev.at).join("");
    }
    if (!delta) return;
    if (!content.lastChild || content.lastChild.nodeType !== Node.TEXT_NODE) content.appendChild(document.createTextNode(""));
    content.lastChild.appendData(delta);
    content.dataset.length = String(streamedLength(content) + charCount(delta));
  }

  function longerText(a, b) {
    const text = (row) => row.querySelector(".streaming-text").textContent;
    return charCount(text(a)) >= charCount(text(b));
  }

  // A reply this tab did not see start (opened or reloaded while it streams): its row, placed
  // after the message it answers, and the composer busy as in the tab that sent it.
  function startedElsewhere(ev) {
    const li = document.getElementById("streaming-template").content.firstElementChild.cloneNode(true);
    li.id = "msg-" + ev.message_id;
    li.dataset.id = ev.message_id;
    li.dataset.parent = ev.parent_id || lastId() || "";
    if (!placeAfterParent(li, li.dataset.parent)) return null;
    streaming = ev.message_id;
    setBusy(true);
    scrollDown();
    return li;
  }

  function scrollDown() { window.scrollTo(0, document.body.scrollHeight); }

  function handle(ev) {
    switch (ev.type) {
      case "message": {
        stored(ev.client_id);
        const existing = rowOf(ev.message_id);
        const el = fromHTML(ev.html);
        if (existing) existing.replaceWith(el);
        else if (!placeAfterParent(el, ev.parent_id)) return;
        if (window.htmx) htmx.process(el);
        scrollDown();
        break;
      }
      case "reply_started": {
        stored(ev.client_id); // also says so, should the message event have been lost
        streaming = ev.message_id;
        setBusy(true);
        // The row comes from the server (_message.html, streaming): tokens go into its text.
        const li = fromHTML(ev.html);
        if (!placeAfterParent(li, ev.parent_id)) return;
        scrollDown();
        break;
      }
      case "token": {
        const row = rowOf(ev.message_id) || startedElsewhere(ev);
        if (!row) return;
        const content = row.querySelector(".streaming-text");
        if (!content) return;
        heard = true;
        addTokens(content, ev);
        if (window.innerHeight + window.scrollY >= document.body.scrollHeight - 80) scrollDown();
        break;
      }
      case "tool_started": {
        const row = rowOf(ev.message_id);
        if (!row) return;
        const box = fromHTML(ev.html); // _tool_call.html, running
        row.querySelector(".tool-calls").appendChild(box);
        break;
      }
      case "tool_finished": {
        const box = document.getElementById("live-tool-" + ev.call_id);
        if (!box) return;
        box.replaceWith(fromHTML(ev.html)); // the box as the stored reply shows it
        break;
      }
      case "reply_done": {
        heard = true;
        if (streaming === ev.message_id) { streaming = null; setBusy(false); }
        if (rowOf(ev.message_id)) replaceRow(ev.message_id, ev.html);
        else {
          // Its start was missed (this tab opened or reconnected meanwhile): it goes after
          // its message, unless that is on another branch than the one shown.
          const el = fromHTML(ev.html);
          if (!placeAfterParent(el, ev.parent_id)) return;
          if (window.htmx) htmx.process(el);
        }
        if (ev.error) showError(ev.error);
        scrollDown();
        break;
      }
      case "conversation_updated": {
        const title = document.querySelector("#rename input[name=title]");
        if (title && document.activeElement !== title) title.value = ev.title;
        const current = document.querySelector(".conversation-row.current .conversation-title");
        if (current) current.textContent = ev.title;
        document.title = ev.title + " · Recollect";
        break;
      }
      case "message_updated":
      case "message_deleted":
      case "message_restored":
        replaceRow(ev.message_id, ev.html);
        break;
      case "message_forgotten": {
        const row = rowOf(ev.message_id);
        if (row) row.remove();
        break;
      }
      case "error":
        // Stop pressed just as the reply ended: nothing was left to stop, and nothing is wrong.
        if (ev.code === "idle") {
          if (!pending) { streaming = null; setBusy(false); }
          break;
        }
        showError(ev.message);
        if (ev.frame === "send") pending = null; // refused: its text stays in the composer
        if (ev.frame === "send" || ev.frame === "regenerate") {
          if (!streaming || ev.code !== "busy") setBusy(Boolean(streaming));
        }
        break;
    }
  }

  form.addEventListener("submit", (e) => {
    e.preventDefault();
    if (pending) return; // the last one is on its way
    const content = input.value;
    if (!content.trim()) { showError("Type a message first."); return; }
    const refusal = tooLong(content);
    if (refusal) { showError(refusal); return; }
    showError("");
    setBusy(true);
    const clientId = Date.now().toString(36) + Math.random().toString(36).slice(2);
    const frame = send({ type: "send", content: content, parent_id: lastId(), client_id: clientId });
    pending = { clientId: clientId, content: content, frame: frame };
  });
  input.addEventListener("keydown", (e) => {
    if (e.key === "Enter" && !e.shiftKey && !e.isComposing) {
      e.preventDefault();
      form.requestSubmit();
    }
  });
  // Typing ahead: when the person pauses, the server is sent the composer's text to embed its
  // question before it is sent (only changed text of 3+ characters, at most the 2,000 the
  // memory query keeps, so a pasted document is not uploaded twice; never queued while closed).
  let typingTimer = null;
  let typedAhead = "";
  input.addEventListener("input", () => {
    clearTimeout(typingTimer);
    typingTimer = setTimeout(() => {
      const text = input.value.trim().slice(0, 2000);
      if (text.length < 3 || text === typedAhead) return;
      if (!socket || socket.readyState !== WebSocket.OPEN) return;
      typedAhead = text;
      socket.send(JSON.stringify({ type: "typing", text: text }));
    }, 300);
  });
  stopButton.addEventListener("click", () => send({ type: "stop" }));

  function openEditor(row) {
    if (row.querySelector(".editor")) return;
    const raw = row.querySelector("textarea.raw");
    // The editor's markup is the page's (#editor-template); only its text is set here.
    const editor = document.getElementById("editor-template").content.firstElementChild.cloneNode(true);
    const area = editor.querySelector("textarea");
    area.value = raw ? raw.value : "";
    area.rows = Math.min(12, Math.max(3, area.value.split("\n").length + 1));
    const branch = editor.querySelector("[data-editor=branch]");
    if (row.dataset.role === "user") {
      branch.addEventListener("click", () => {
        if (!area.value.trim()) return;
        const refusal = tooLong(area.value);
        if (refusal) { showError(refusal); return; }
        setBusy(true);
        send({ type: "send", content: area.value, parent_id: row.dataset.parent || null });
      });
    } else {
      branch.remove(); // a reply is edited in place only
    }
    editor.querySelector("[data-editor=cancel]").addEventListener("click", () => editor.remove());
    editor.addEventListener("submit", (e) => {
      e.preventDefault();
      const refusal = tooLong(area.value);
      if (refusal) { showError(refusal); return; }
      send({ type: "edit", message_id: row.dataset.id, content: area.value });
    });
    row.querySelector(".content").after(editor);
    area.focus();
  }

  // A refused htmx action (a pin past the rate limit, a message gone meanwhile) says why
  // instead of doing nothing: htmx swaps nothing on an error answer.
  document.body.addEventListener("htmx:responseError", (e) => {
    const xhr = e.detail.xhr;
    const plain = (xhr.getResponseHeader("Content-Type") || "").startsWith("text/plain");
    showError(plain && xhr.responseText ? xhr.responseText : `That did not work (HTTP ${xhr.status}); nothing was changed.`);
  });

  root.addEventListener("submit", (e) => {
    const form = e.target.closest("form[data-forget]");
    if (!form) return;
    e.preventDefault();
    // The forget dialog (chat/_forget.html) lists the messages that echo this one (the ticked
    // ones are forgotten with it) and what memory made that holds its rare words (an unticked
    // one keeps them).
    const copies = [...form.querySelectorAll("input[name=copies]:checked")].map((box) => box.value);
    const keep = [...form.querySelectorAll("input[name=echoes]:not(:checked)")].map((box) => box.value);
    send({ type: "forget", message_id: form.dataset.forget, copies, keep });
    form.closest(".forget-slot").replaceChildren();
  });

  root.addEventListener("click", (e) => {
    const button = e.target.closest("[data-action]");
    if (!button) return;
    const row = button.closest("li.message");
    const action = button.dataset.action;
    if (action === "copy" && row) {
      // As it was written (its Markdown); app.js does the copying.
      const raw = row.querySelector("textarea.raw");
      window.recollectCopy(raw ? raw.value : row.querySelector(".content").innerText, button);
      return;
    }
    if (action === "close-history") { button.closest(".history").replaceChildren(); return; }
    if (action === "close-forget") { button.closest(".forget-slot").replaceChildren(); return; }
    if (action === "unfold") {
      const folded = document.getElementById(button.getAttribute("aria-controls")).classList.toggle("folded");
      button.textContent = folded ? "Show more" : "Show less";
      button.setAttribute("aria-expanded", folded ? "false" : "true");
      return;
    }
    if (!row || action === "history") return;
    const id = row.dataset.id;
    if (action === "edit") openEditor(row);
    else if (action === "delete") send({ type: "delete", message_id: id });
    else if (action === "restore") send({ type: "restore", message_id: id });
    else if (action === "regenerate") {
      setBusy(true);
      send({ type: "regenerate", message_id: id });
    }
  });

  // The reply being written, as the thread on screen shows it: a row the server rendered from
  // its draft (the page was opened or reloaded meanwhile), or none.
  function followStreaming() {
    const live = thread().querySelector(":scope > li.message.streaming");
    if (live) { streaming = live.dataset.id; setBusy(true); }
    else if (streaming && !rowOf(streaming)) { streaming = null; setBusy(false); }
    else if (streaming && !rowOf(streaming).classList.contains("streaming")) { streaming = null; setBusy(false); }
  }

  // A reply shown from its draft whose writer says nothing (it ended before this socket
  // joined, or it is quiet in a tool call): the thread is read again until it is done.
  function watchDraft() {
    if (!streaming) return;
    if (!heard) catchUp();
    heard = false;
    setTimeout(watchDraft, 3000);
  }

  // A temporary chat ends when the person leaves it (another page, a reload, the tab closed):
  // the server deletes it with everything in it. A page kept for Back is gone too, so it is
  // loaded again rather than shown.
  if (root.dataset.leaveUrl) {
    window.addEventListener("pagehide", () => {
      const form = new FormData();
      form.append("csrfmiddlewaretoken", root.dataset.csrf);
      navigator.sendBeacon(root.dataset.leaveUrl, form);
    });
    window.addEventListener("pageshow", (e) => { if (e.persisted) location.reload(); });
  }

  const sidebarList = document.getElementById("sidebar-list");
  if (sidebarList && window.matchMedia("(min-width: 761px)").matches) sidebarList.open = true;

  setBusy(false);
  followStreaming();
  if (streaming) setTimeout(watchDraft, 3000);
  connect();
  // A conversation opens at its latest message (a link to one message, at that message).
  if (!location.hash) scrollDown();
})();
