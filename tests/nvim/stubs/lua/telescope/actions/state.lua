return { get_selected_entry = function() return require("telescope.pickers")._selected end }
