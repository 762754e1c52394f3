/**
 * The top bar's links: in one row on a wide screen, behind a "Menu" button on a narrow one (styles.css, max-width
 * 900px), where choosing a page closes the menu again.
 */
import { useEffect, useState, type ReactNode } from "react";
import { useLocation } from "react-router";

export function NavMenu({ children }: { children: ReactNode }) {
  const [open, setOpen] = useState(false);
  const location = useLocation();
  useEffect(() => setOpen(false), [location.pathname, location.search]);
  return (
    <>
      <button type="button" className="menu-toggle" aria-expanded={open} aria-controls="nav-links" onClick={() => setOpen((o) => !o)}>
        Menu
      </button>
      <div id="nav-links" className={`nav-links${open ? " open" : ""}`}>
        {children}
      </div>
    </>
  );
}
