// What every page shares: ⋯ menus (a <details class="menu">) close when the person clicks
// elsewhere, presses Escape or has used one of their actions; text boxes with a character
// limit say how much is left; Copy buttons (a code block's, a chat message's) copy.
(function () {
  "use strict";
  function closeMenus(except) {
    document.querySelectorAll("details.menu[open]").forEach((menu) => {
      if (menu !== except) menu.open = false;
    });
  }
  document.addEventListener("click", (e) => {
    closeMenus(e.target.closest("details.menu"));
  });
  document.addEventListener("keydown", (e) => {
    if (e.key !== "Escape") return;
    const open = e.target.closest && e.target.closest("details.menu[open]");
    closeMenus(null);
    if (open) open.querySelector("summary").focus();
  });
  // An action of a menu was taken (htmx answered): the menu closes, but for a switch, which
  // shows its new state. (An element swapped away hands the event to an ancestor still there.)
  document.body.addEventListener("htmx:afterRequest", (e) => {
    const menu = e.target.closest && e.target.closest("details.menu[open]");
    const source = (e.detail.requestConfig && e.detail.requestConfig.elt) || e.target;
    if (menu && !source.closest(".memory-switches")) menu.open = false;
  });

  // Copy `text`, and say so on the button for a moment.
  function copy(text, button) {
    const done = () => {
      const label = button.textContent, named = button.getAttribute("aria-label");
      button.textContent = "Copied";
      if (named) button.setAttribute("aria-label", "Copied");
      button.classList.add("copied");
      setTimeout(() => {
        button.textContent = label;
        if (named) button.setAttribute("aria-label", named);
        button.classList.remove("copied");
      }, 1500);
    };
    const failed = () => alert("The browser did not allow copying: select the text and copy it instead.");
    if (navigator.clipboard && window.isSecureContext) {
      navigator.clipboard.writeText(text).then(done, () => (copyCommand(text) ? done() : failed()));
    } else if (copyCommand(text)) {
      done();
    } else {
      failed();
    }
  }

  // A page served over plain http from another machine has no clipboard API: the browser's
  // copy command still works, its text given as the copy happens.
  function copyCommand(text) {
    const give = (e) => { e.clipboardData.setData("text/plain", text); e.preventDefault(); };
    document.addEventListener("copy", give);
    let ok = false;
    try { ok = document.execCommand("copy"); } catch (err) { ok = false; }
    document.removeEventListener("copy", give);
    return ok;
  }
  window.recollectCopy = copy;
  document.addEventListener("click", (e) => {
    const button = e.target.closest("[data-action=copy-code]");
    if (button) copy(button.closest(".code-block").querySelector("pre").innerText, button);
  });

  function count(area) {
    const out = document.getElementById(area.dataset.counter);
    if (!out) return;
    const limit = Number(area.getAttribute("maxlength")) || 0;
    out.textContent = area.value.length.toLocaleString("en-US") + " of " + limit.toLocaleString("en-US") + " characters";
  }
  document.querySelectorAll("textarea[data-counter]").forEach((area) => {
    area.addEventListener("input", () => count(area));
  });
})();
