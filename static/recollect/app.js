// What every page shares: ⋯ menus (a <details class="menu">) close when the person clicks
// elsewhere, presses Escape or has used one of their actions; text boxes with a character
// limit say how much is left.
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
  // An action of a menu was taken (htmx answered): the menu closes.
  document.body.addEventListener("htmx:afterRequest", (e) => {
    const menu = e.target.closest && e.target.closest("details.menu[open]");
    if (menu && !e.target.closest(".memory-switches")) menu.open = false;
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
