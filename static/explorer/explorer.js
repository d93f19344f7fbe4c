// The explorer's htmx forms answer a refusal (an upload too large or of no known kind, a
// correction too long) with the same fragment as a success, saying why, and a 4xx status.
// htmx swaps nothing on an error answer, so the page would stay as it was: swap such a fragment
// in like any answer. An error that is not a fragment (a plain-text refusal, a server error) is
// shown beside what was used.
(function () {
  "use strict";

  function showBeside(elt, text) {
    const anchor = elt.closest("form, section, li, tr") || elt;
    let note = anchor.previousElementSibling;
    if (!note || !note.classList.contains("request-error")) {
      note = document.createElement("p");
      note.className = "error request-error";
      note.setAttribute("role", "alert");
      anchor.before(note);
    }
    note.textContent = text;
  }

  // The statuses the explorer's views answer with their fragment and the reason (a 404 or a 500
  // is Django's whole page, not a fragment).
  const FRAGMENT_REFUSALS = new Set([400, 413, 422]);
  const requester = (e) => (e.detail.requestConfig && e.detail.requestConfig.elt) || e.target;

  document.body.addEventListener("htmx:beforeSwap", (e) => {
    const xhr = e.detail.xhr;
    if (!e.detail.isError) return;
    const type = xhr.getResponseHeader("Content-Type") || "";
    if (FRAGMENT_REFUSALS.has(xhr.status) && type.startsWith("text/html") && xhr.responseText) {
      e.detail.shouldSwap = true;
      e.detail.isError = false;
      return;
    }
    const plain = type.startsWith("text/plain") && xhr.responseText;
    showBeside(requester(e),
      plain ? xhr.responseText : `That did not work (HTTP ${xhr.status}); nothing was changed.`);
  });

  document.body.addEventListener("htmx:sendError", (e) => {
    showBeside(requester(e), "The server could not be reached; nothing was changed.");
  });
})();
