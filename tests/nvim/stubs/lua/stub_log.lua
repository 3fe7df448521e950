-- Stand-ins for Telescope, fzf-lua and snacks.nvim (not installable from a package registry): each records
-- what the plugin handed it and confirms the first entry, so the backend code paths run headless.
-- They check the plugin's calls against the shape of those APIs, not the real pickers.
return { calls = {} }
